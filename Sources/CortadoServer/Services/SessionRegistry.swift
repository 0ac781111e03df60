import CortadoCore
import CortadoGRPC
import Foundation

/// The sessions of stateful models (`cortado.v1.Predictor` CreateSession / Predict with a
/// session / EndSession): each holds the model it runs (a version, and a function of a
/// multi-function program) and its `MLState`. Bounded in number; a session idle longer than
/// the timeout ends, so a client that never ends its sessions cannot fill the server.
public final class SessionRegistry: @unchecked Sendable {
    public struct Limits: Sendable {
        /// Sessions alive at once.
        public var maxSessions = 256
        /// A session with no call for this long ends.
        public var idleSeconds: Double = 600
        public init() {}
    }

    final class Session: @unchecked Sendable {
        let id: String
        let modelName: String
        let model: MLModel
        let state: MLState
        /// Keeps the served version (and its scheduler) alive while the session lives.
        let served: ServedModel
        var lastUsed: UInt64

        init(id: String, served: ServedModel, model: MLModel, state: MLState, now: UInt64) {
            self.id = id; self.modelName = served.name; self.served = served; self.model = model; self.state = state; lastUsed = now
        }
    }

    public let limits: Limits
    private let lock = NSLock()
    private var sessions: [String: Session] = [:]

    public init(limits: Limits = Limits()) { self.limits = limits }

    public var count: Int { lock.withLock { sessions.count } }

    /// A new session of `model` (a version's model, or one function of it).
    func create(served: ServedModel, model: MLModel) throws -> Session {
        guard model.isStateful else {
            throw GRPCStatus(.failedPrecondition, "model '\(served.name)' keeps no state: predict without a session")
        }
        let state: MLState
        do { state = try model.makeState() } catch { throw GRPCStatus(.internal, "cannot make the model's state: \(error)") }
        let now = DispatchTime.now().uptimeNanoseconds
        return try lock.withLock { () throws -> Session in
            sweep(now: now)
            guard sessions.count < limits.maxSessions else {
                throw GRPCStatus(.resourceExhausted, "\(limits.maxSessions) sessions are open (--max-sessions); end one with EndSession or wait for an idle one to expire")
            }
            var id = ""
            repeat { id = Self.newID() } while sessions[id] != nil
            let session = Session(id: id, served: served, model: model, state: state, now: now)
            sessions[id] = session
            return session
        }
    }

    /// The session, marked as used now; NOT_FOUND when it ended or never existed.
    func use(_ id: String, model name: String) throws -> Session {
        let now = DispatchTime.now().uptimeNanoseconds
        return try lock.withLock { () throws -> Session in
            sweep(now: now)
            guard let session = sessions[id] else {
                throw GRPCStatus(.notFound, "no session '\(id)': it ended, expired after \(Int(limits.idleSeconds)) s idle, or was never created")
            }
            guard name.isEmpty || name == session.modelName else {
                throw GRPCStatus(.invalidArgument, "session '\(id)' belongs to model '\(session.modelName)', not '\(name)'")
            }
            session.lastUsed = now
            return session
        }
    }

    /// Ends a session; NOT_FOUND when there is none by that id.
    func end(_ id: String) throws {
        try lock.withLock { () throws in
            guard sessions.removeValue(forKey: id) != nil else { throw GRPCStatus(.notFound, "no session '\(id)'") }
        }
    }

    /// Ends the sessions idle past the timeout (under the lock).
    private func sweep(now: UInt64) {
        let limit = UInt64(limits.idleSeconds * 1e9)
        sessions = sessions.filter { now &- $0.value.lastUsed < limit }
    }

    static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}
