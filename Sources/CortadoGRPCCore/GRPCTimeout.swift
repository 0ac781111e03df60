/// The `grpc-timeout` request header: an ASCII integer of at most 8 digits followed by a
/// unit (H hours, M minutes, S seconds, m milliseconds, u microseconds, n nanoseconds).
public enum GRPCTimeout {
    /// The timeout in nanoseconds, or nil when the header is malformed.
    public static func parse(_ value: String) -> UInt64? {
        let bytes = Array(value.utf8)
        guard bytes.count >= 2, bytes.count <= 9 else { return nil }
        var amount: UInt64 = 0
        for byte in bytes.dropLast() {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            amount = amount * 10 + UInt64(byte - UInt8(ascii: "0"))
        }
        let perUnit: UInt64
        switch bytes.last! {
        case UInt8(ascii: "H"): perUnit = 3_600_000_000_000
        case UInt8(ascii: "M"): perUnit = 60_000_000_000
        case UInt8(ascii: "S"): perUnit = 1_000_000_000
        case UInt8(ascii: "m"): perUnit = 1_000_000
        case UInt8(ascii: "u"): perUnit = 1_000
        case UInt8(ascii: "n"): perUnit = 1
        default: return nil
        }
        let (product, overflow) = amount.multipliedReportingOverflow(by: perUnit)
        return overflow ? UInt64.max : product
    }

    /// The header value for a timeout of `nanoseconds`: the finest unit whose amount fits in
    /// 8 digits, rounded up so a client never announces less time than it waits.
    public static func encode(nanoseconds: UInt64) -> String {
        let units: [(perUnit: UInt64, letter: Character)] = [
            (1, "n"), (1_000, "u"), (1_000_000, "m"), (1_000_000_000, "S"), (60_000_000_000, "M"), (3_600_000_000_000, "H"),
        ]
        for (perUnit, letter) in units {
            let (quotient, remainder) = nanoseconds.quotientAndRemainder(dividingBy: perUnit)
            let amount = quotient + (remainder > 0 ? 1 : 0)
            if amount <= 99_999_999 { return "\(max(amount, 1))\(letter)" }
        }
        return "99999999H"
    }
}
