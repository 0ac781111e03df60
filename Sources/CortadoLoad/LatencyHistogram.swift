/// Latency counts in HdrHistogram's layout: values below `2 × 10^digits` (rounded up to a power
/// of two, the sub-bucket count) are counted exactly; above, each power-of-two range is split
/// into half that many equal slots, so every recorded value is kept to `digits` significant
/// decimal digits whatever its magnitude. Percentiles report the highest value a slot stands
/// for, as HdrHistogram does. Fixed memory, O(1) record.
///
/// (Written here instead of depending on hdrhistogram-swift: that package pulls in
/// swift-docc-plugin, whose presence makes SwiftPM build swift-protobuf's bundled protoc —
/// minutes of C++ on every fresh CI build.)
struct LatencyHistogram {
    enum Digits: Int { case two = 2, three = 3 }

    private let subBucketBits: Int  // log2(sub-bucket count)
    private let halfCount: Int
    private let highest: UInt64
    private var counts: [UInt64]
    private(set) var totalCount: UInt64 = 0
    private(set) var min: UInt64 = .max
    private(set) var max: UInt64 = 0
    private var sum: Double = 0

    init(highestTrackableValue: UInt64, digits: Digits) {
        var needed = 2
        for _ in 0..<digits.rawValue { needed *= 10 }
        var bits = 1
        while (1 << bits) < needed { bits += 1 }
        subBucketBits = bits
        halfCount = 1 << (bits - 1)
        highest = highestTrackableValue
        counts = [UInt64](repeating: 0, count: Self.index(highestTrackableValue, bits: bits) + 1)
    }

    /// Slot of a value: exact below the sub-bucket count, then `halfCount` slots per power of two.
    private static func index(_ value: UInt64, bits: Int) -> Int {
        let subBucketCount = UInt64(1) << bits
        if value < subBucketCount { return Int(value) }
        let magnitude = 63 - value.leadingZeroBitCount  // floor(log2(value)) ≥ bits
        let bucket = magnitude - bits + 1  // ≥ 1
        let sub = Int(value >> UInt64(bucket))  // in [halfCount, subBucketCount)
        return (bucket + 1) * (1 << (bits - 1)) + (sub - (1 << (bits - 1)))
    }

    /// The highest value slot `i` stands for.
    private func highestValue(at i: Int) -> UInt64 {
        let subBucketCount = 1 << subBucketBits
        if i < subBucketCount { return UInt64(i) }
        let bucket = i / halfCount - 1
        let sub = UInt64(i % halfCount + halfCount)
        return ((sub + 1) << UInt64(bucket)) - 1
    }

    var mean: Double { totalCount == 0 ? 0 : sum / Double(totalCount) }

    mutating func record(_ value: UInt64) {
        let v = Swift.min(value, highest)
        counts[Self.index(v, bits: subBucketBits)] += 1
        totalCount += 1
        sum += Double(v)
        if v < min { min = v }
        if v > max { max = v }
    }

    /// The smallest recorded value (to the histogram's precision) at or below which `percentile`
    /// percent of the values lie.
    func valueAtPercentile(_ percentile: Double) -> UInt64 {
        guard totalCount > 0 else { return 0 }
        let p = Swift.min(Swift.max(percentile, 0), 100)
        let target = Swift.max(1, UInt64((p / 100 * Double(totalCount)).rounded(.up)))
        var seen: UInt64 = 0
        for i in counts.indices where counts[i] > 0 {
            seen += counts[i]
            if seen >= target { return Swift.min(highestValue(at: i), max) }
        }
        return max
    }
}
