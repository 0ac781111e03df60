/// Bytes of request messages held in memory, against a limit: one budget per connection,
/// whose reservations also count against the process's budget (its parent).
///
/// A message's bytes are reserved whole when its length prefix arrives: a message cannot be
/// handed to a handler before its last byte, so admitting part of one and withholding window
/// for the rest would let a few unfinished messages hold every byte of a budget with none
/// able to finish. Reserving up front either admits a message that can finish or refuses it
/// at once. Loop thread only.
final class GRPCBufferBudget {
    let limit: Int
    let parent: GRPCBufferBudget?
    private(set) var used = 0

    init(limit: Int, parent: GRPCBufferBudget? = nil) {
        self.limit = limit
        self.parent = parent
    }

    var room: Int { limit - used }

    /// Takes `bytes` here and in every parent when all have room; otherwise takes nothing and
    /// returns the budget that is short.
    func reserve(_ bytes: Int) -> GRPCBufferBudget? {
        if bytes > room { return self }
        if let parent, let short = parent.reserve(bytes) { return short }
        used += bytes
        return nil
    }

    func release(_ bytes: Int) {
        guard bytes > 0 else { return }
        used -= bytes
        parent?.release(bytes)
    }

    /// Less room left here or in a parent than `bytes`: new streams are refused.
    func isSpent(below bytes: Int) -> Bool {
        room < bytes || (parent?.isSpent(below: bytes) ?? false)
    }
}
