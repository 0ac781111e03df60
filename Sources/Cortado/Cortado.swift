@_exported import CortadoCore
@_exported import CortadoModels
@_exported import CortadoSpec
import CCortadoAutoload

// `import Cortado` is all a program needs: CCortadoAutoload's constructor points the kind
// registry at this function before main, so `MLModel(contentsOf:)` loads every built-in kind
// with no registration call, as on Apple platforms.

/// Registers the built-in kinds (the registry calls it once, on its first lookup).
@_cdecl("cortado_register_builtin_kinds")
public func cortadoRegisterBuiltinKinds() {
    CortadoModels.registerBuiltinKinds()
}

/// True when the autoload constructor is linked into this program (it always is with this
/// module; the reference keeps a linker from dropping it).
public var cortadoAutoloadLinked: Bool { cortado_autoload_linked != 0 }
