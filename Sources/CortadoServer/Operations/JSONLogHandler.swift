import Foundation
import Logging

/// A swift-log handler that writes one JSON object per line on stderr (`cortado serve
/// --log-format json`): `time` (UTC, ISO 8601 with milliseconds), `level`, `label`, `message`,
/// then every metadata entry as a field of its own. Numbers and booleans given as metadata stay
/// JSON numbers and booleans (a call's `latency_ms`); everything else is a string, an array or
/// an object. Log collectors (Loki, Elasticsearch, Cloud Logging) read the fields without a parser.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let write: @Sendable (String) -> Void

    /// Lines go to `write` (one call per line, newline included); stderr by default.
    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil,
                write: @escaping @Sendable (String) -> Void = JSONLogHandler.standardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let provided = metadataProvider?.get() { fields.merge(provided) { _, new in new } }
        if let given = event.metadata { fields.merge(given) { _, new in new } }
        write(Self.line(time: Date(), level: event.level, label: label, message: event.message.description, metadata: fields))
    }

    /// The JSON line for one event (fixed fields first, then the metadata sorted by key).
    public static func line(time: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata) -> String {
        var out = "{\"time\":\"\(timestamp(time))\",\"level\":\"\(level.rawValue)\",\"label\":"
        appendString(label, to: &out)
        out += ",\"message\":"
        appendString(message, to: &out)
        for key in metadata.keys.sorted() where !reserved.contains(key) {
            out += ","
            appendString(key, to: &out)
            out += ":"
            appendValue(metadata[key]!, to: &out)
        }
        out += "}\n"
        return out
    }

    private static let reserved: Set<String> = ["time", "level", "label", "message"]

    /// UTC, millisecond precision: 2026-11-26T11:40:00.123Z.
    static func timestamp(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        var whole = time_t(seconds.rounded(.down))
        let millis = min(999, Int((seconds - Double(whole)) * 1000))
        var parts = tm()
        gmtime_r(&whole, &parts)
        func pad(_ n: Int32, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T" +
            "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(millis), 3))Z"
    }

    static func appendValue(_ value: Logger.Metadata.Value, to out: inout String) {
        switch value {
        case .string(let s):
            appendString(s, to: &out)
        case .stringConvertible(let v):
            switch v {
            case let b as Bool: out += b ? "true" : "false"
            case let d as Double where d.isFinite: out += "\(d)"
            case let i as Int: out += "\(i)"
            case let i as Int64: out += "\(i)"
            case let u as UInt64: out += "\(u)"
            default: appendString(v.description, to: &out)
            }
        case .array(let values):
            out += "["
            for (i, v) in values.enumerated() {
                if i > 0 { out += "," }
                appendValue(v, to: &out)
            }
            out += "]"
        case .dictionary(let fields):
            out += "{"
            for (i, key) in fields.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                appendString(key, to: &out)
                out += ":"
                appendValue(fields[key]!, to: &out)
            }
            out += "}"
        }
    }

    /// A JSON string literal: quotes, backslashes and control characters escaped.
    static func appendString(_ s: String, to out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    private static let lock = NSLock()

    /// Writes a line to stderr in one call, under a lock: lines from threads never interleave.
    public static let standardError: @Sendable (String) -> Void = { line in
        var bytes = Array(line.utf8)
        lock.lock()
        defer { lock.unlock() }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Foundation.write(STDERR_FILENO, $0.baseAddress! + offset, $0.count - offset) }
            if n <= 0 { if errno == EINTR { continue }; return }
            offset += n
        }
    }
}
