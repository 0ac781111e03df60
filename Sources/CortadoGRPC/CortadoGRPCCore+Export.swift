// The gRPC semantics (status, framing, grpc-timeout, metadata, method paths) live in
// CortadoGRPCCore, shared with the client layers; `import CortadoGRPC` keeps bringing them.
@_exported import CortadoGRPCCore
