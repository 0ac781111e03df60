import CortadoGRPC
import CortadoServerProtos
import Foundation

/// `grpc.health.v1.Health`: SERVING while the server takes calls, NOT_SERVING while it
/// drains; the overall status ("") is also NOT_SERVING while a required model is missing. A
/// service name asks about one service (or a model, by its name).
///
/// `Watch` streams the status: the current one at once, then each change (readiness, a model
/// loaded or unloaded); a name the server does not know reads SERVICE_UNKNOWN, as the health
/// protocol asks, and the call stays open. When the server drains, watchers get NOT_SERVING
/// and their calls end (OK), so they do not hold the drain up.
public final class HealthService: ScopedService, @unchecked Sendable {
    public typealias Status = Grpc_Health_V1_HealthCheckResponse.ServingStatus
    public let serviceName = "grpc.health.v1.Health"
    let context: ServerContext
    let services: @Sendable () -> [String]

    private struct Watcher {
        let call: GRPCServerCall
        let service: String
        var last: Status
    }
    private let lock = NSLock()
    private var watchers: [ObjectIdentifier: Watcher] = [:]

    /// Open with `--auth-tokens` too: Kubernetes' gRPC probes send no token.
    public var access: [String: MethodAccess] { ["Check": .open, "Watch": .open] }

    public init(context: ServerContext, services: @escaping @Sendable () -> [String]) {
        self.context = context
        self.services = services
        context.observeDrain { [weak self] in
            guard let self else { return }
            self.statusesChanged()
            self.endWatches()
        }
    }

    public var methods: [String: GRPCUnaryHandler] {
        [
            "Check": { [self] call in
                context.inline(call) {
                    let request = try context.decode(Grpc_Health_V1_HealthCheckRequest.self, call)
                    let status = status(of: request.service)
                    guard status != .serviceUnknown else {
                        throw GRPCStatus(.notFound, "unknown service or model '\(request.service)'")
                    }
                    var response = Grpc_Health_V1_HealthCheckResponse()
                    response.status = status
                    return response
                }
            },
            "Watch": { [self] call in watch(call) },
        ]
    }

    func status(of service: String) -> Status {
        // The overall status ("") is readiness: NOT_SERVING while draining or while a required
        // model (--require-models) is not loaded. A service or a loaded model serves unless
        // the server drains.
        if service.isEmpty { return context.isReady ? .serving : .notServing }
        let serving: Status = context.isDraining ? .notServing : .serving
        if services().contains(service) { return serving }
        if (try? context.repository.model(service)) != nil { return serving }
        return .serviceUnknown
    }

    private func watch(_ call: GRPCServerCall) {
        let request: Grpc_Health_V1_HealthCheckRequest
        do { request = try context.decode(Grpc_Health_V1_HealthCheckRequest.self, call) } catch {
            call.fail(error)
            return
        }
        let id = ObjectIdentifier(call)
        let status = self.status(of: request.service)
        lock.withLock { watchers[id] = Watcher(call: call, service: request.service, last: status) }
        // The client left: forget the watch and end the call (nothing is sent; the transport
        // counts it finished, so a drain does not wait for it).
        call.onCancel { [weak self] in
            _ = self?.lock.withLock { self?.watchers.removeValue(forKey: id) }
            call.finish()
        }
        send(status, to: call)
        if context.isDraining { endWatches() }
    }

    private func send(_ status: Status, to call: GRPCServerCall) {
        var response = Grpc_Health_V1_HealthCheckResponse()
        response.status = status
        if let bytes: [UInt8] = try? response.serializedBytes() { call.send(bytes) }
    }

    /// Sends each watcher its service's status if it changed (after a readiness change, a
    /// load or an unload).
    public func statusesChanged() {
        let current = lock.withLock { Array(watchers) }
        for (id, watcher) in current {
            let status = self.status(of: watcher.service)
            guard status != watcher.last else { continue }
            lock.withLock { watchers[id]?.last = status }
            send(status, to: watcher.call)
        }
    }

    /// Ends every watch (the server is draining).
    private func endWatches() {
        let ended = lock.withLock { () -> [Watcher] in
            defer { watchers.removeAll() }
            return Array(watchers.values)
        }
        for watcher in ended { watcher.call.finish() }
    }
}
