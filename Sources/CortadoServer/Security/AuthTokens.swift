import Foundation

/// What a bearer token lets its holder do.
public enum AuthScope: String, Sendable, CaseIterable, Comparable {
    /// Predictions and the reads around them (model metadata, configuration, statistics).
    case infer
    /// Changing the server: loading and unloading models, the repository index, shared memory.
    case admin
    /// The metrics port's `/metrics`.
    case metrics

    public static func < (a: AuthScope, b: AuthScope) -> Bool { a.rawValue < b.rawValue }
}

/// The bearer tokens of `--auth-tokens FILE`: one per line, `TOKEN SCOPE[,SCOPE…]`, blank
/// lines and `#` comments (whole lines, or after the scopes) ignored.
///
/// Lookups compare the presented token with every known one in constant time: how long a
/// refusal takes says nothing about how much of a token was right, nor which token was near.
public struct AuthTokens: Sendable {
    public struct ParseError: Error, CustomStringConvertible {
        public let description: String
    }

    private struct Entry: Sendable {
        let token: [UInt8]
        let scopes: Set<AuthScope>
    }
    private let entries: [Entry]

    public var count: Int { entries.count }

    public init(parsing text: String, source: String = "the token file") throws(ParseError) {
        var entries: [Entry] = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let where_ = "\(source) line \(index + 1)"
            let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            if fields.isEmpty { continue }
            guard fields.count == 2 else {
                throw ParseError(description: "\(where_): expected 'TOKEN SCOPE[,SCOPE…]' (scopes: \(AuthScope.allCases.map(\.rawValue).joined(separator: ", ")); no spaces after the commas)")
            }
            let token = Array(fields[0].utf8)
            // Short tokens can be guessed; refuse them rather than serve with them.
            guard token.count >= 16 else { throw ParseError(description: "\(where_): a token must have at least 16 characters (got \(token.count))") }
            var scopes: Set<AuthScope> = []
            for name in fields[1].split(separator: ",", omittingEmptySubsequences: false) {
                guard let scope = AuthScope(rawValue: String(name)) else {
                    throw ParseError(description: "\(where_): unknown scope '\(name)' (scopes: \(AuthScope.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
                scopes.insert(scope)
            }
            guard !entries.contains(where: { $0.token == token }) else { throw ParseError(description: "\(where_): this token is listed twice") }
            entries.append(Entry(token: token, scopes: scopes))
        }
        guard !entries.isEmpty else { throw ParseError(description: "\(source) lists no token: every call would be refused") }
        self.entries = entries
    }

    /// Reads and parses a token file.
    public init(contentsOf path: String) throws(ParseError) {
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw ParseError(description: "cannot read token file \(path): \(error.localizedDescription)")
        }
        try self.init(parsing: text, source: path)
    }

    /// The scopes of `token`, or nil when it is not known. Looks at every entry, whatever
    /// matched, with no early exit.
    public func scopes(of token: Substring) -> Set<AuthScope>? {
        var found: Set<AuthScope>?
        var presented = Array(token.utf8)
        for entry in entries where Self.constantTimeEqual(presented, entry.token) {
            found = entry.scopes
        }
        presented.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
        return found
    }

    /// Equality whose time depends only on `presented`'s length: every byte is looked at,
    /// the differences are OR-ed together, and there is no early exit.
    @inline(never)
    static func constantTimeEqual(_ presented: [UInt8], _ known: [UInt8]) -> Bool {
        var difference = UInt8(truncatingIfNeeded: presented.count ^ known.count) | (presented.count == known.count ? 0 : 1)
        if known.isEmpty { return false }
        for i in 0..<presented.count {
            difference |= presented[i] ^ known[i % known.count]
        }
        return difference == 0
    }
}
