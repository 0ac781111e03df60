import CortadoGRPC
import CortadoServerProtos

/// `grpc.health.v1.Health`: SERVING while the server takes calls, NOT_SERVING while it
/// drains. A service name asks about one service (or a model, by its name).
public final class HealthService: GRPCService, @unchecked Sendable {
    public let serviceName = "grpc.health.v1.Health"
    let context: ServerContext
    let services: @Sendable () -> [String]

    public init(context: ServerContext, services: @escaping @Sendable () -> [String]) {
        self.context = context
        self.services = services
    }

    public var methods: [String: GRPCUnaryHandler] {
        ["Check": { [self] call in
            context.inline(call) {
                let request = try context.decode(Grpc_Health_V1_HealthCheckRequest.self, call)
                var response = Grpc_Health_V1_HealthCheckResponse()
                let serving: Grpc_Health_V1_HealthCheckResponse.ServingStatus = context.isReady ? .serving : .notServing
                if request.service.isEmpty || services().contains(request.service) {
                    response.status = serving
                } else if (try? context.repository.model(request.service)) != nil {
                    response.status = serving
                } else {
                    throw GRPCStatus(.notFound, "unknown service or model '\(request.service)'")
                }
                return response
            }
        }]
    }
}
