import CCortadoPlugin
import CLibUV
import Foundation

/// One opened plugin library: its handle (never closed), the host table it was given and the
/// plugin table its entry point returned, with the ABI version checked.
final class PluginLibrary: @unchecked Sendable {
    struct LoadError: Error { let message: String }

    let path: String
    let name: String
    let table: UnsafePointer<cortado_plugin>
    private let handle: UnsafeMutablePointer<uv_lib_t>

    /// "plugin 'swish' (/opt/plugins/libswish.so)".
    var provider: String { "plugin '\(name)' (\(path))" }
    var classCount: Int { Int(max(table.pointee.class_count, 0)) }

    init(path: String) throws {
        self.path = path
        // Bind every symbol now and pin the library: `uv_dlopen` binds lazily, so a plugin with an
        // unresolved symbol would otherwise abort the whole process at its first call (in the
        // server, mid-request). The handle this takes is kept (never closed, NOTES.md); the
        // `uv_dlopen` below shares the same mapping.
        guard dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) != nil else {
            throw LoadError(message: "plugin \(path) cannot be opened: \(String(cString: dlerror()))")
        }
        // Never freed or closed: the library stays mapped for the life of the process.
        handle = .allocate(capacity: 1)
        handle.initialize(to: uv_lib_t())
        guard uv_dlopen(path, handle) == 0 else {
            throw LoadError(message: "plugin \(path) cannot be opened: \(String(cString: uv_dlerror(handle)))")
        }
        var symbol: UnsafeMutableRawPointer?
        guard uv_dlsym(handle, CORTADO_PLUGIN_ENTRY_NAME, &symbol) == 0, let symbol else {
            throw LoadError(message: "plugin \(path) has no entry point '\(CORTADO_PLUGIN_ENTRY_NAME)' (is it a Cortado plugin, built with the entry point exported?)")
        }
        let entry = unsafeBitCast(symbol, to: cortado_plugin_entry_fn.self)
        guard let table = entry(PluginLibrary.hostTable(for: path)) else {
            throw LoadError(message: "plugin \(path) refused to load (its entry point returned no table; see its log lines)")
        }
        guard table.pointee.abi_version == CORTADO_PLUGIN_ABI_VERSION else {
            throw LoadError(message: "plugin \(path) speaks plugin ABI version \(table.pointee.abi_version), this Cortado speaks version \(CORTADO_PLUGIN_ABI_VERSION): rebuild it against Plugins/include/cortado_plugin.h")
        }
        self.table = table
        let declared = table.pointee.name.map { String(cString: $0) } ?? ""
        self.name = declared.isEmpty ? URL(fileURLWithPath: path).lastPathComponent : declared
        guard table.pointee.class_count >= 0, table.pointee.class_count == 0 || table.pointee.classes != nil else {
            throw LoadError(message: "plugin \(path) declares \(table.pointee.class_count) classes but no class table")
        }
    }

    /// A host table for one library (it lives for the process): its context is the library's
    /// path, so log lines name it.
    private static func hostTable(for path: String) -> UnsafeMutablePointer<cortado_host> {
        let host = UnsafeMutablePointer<cortado_host>.allocate(capacity: 1)
        host.initialize(to: cortado_host(abi_version: CORTADO_PLUGIN_ABI_VERSION, context: UnsafeMutableRawPointer(strdup(path)), log: { context, level, message in
            let levels = ["debug", "info", "warning", "error"]
            let name = context.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) } ?? "?"
            let text = message.map { String(cString: $0) } ?? ""
            let tag = Int(level.rawValue) < levels.count ? levels[Int(level.rawValue)] : "log"
            if let sink = CortadoPluginHost.logSink {
                sink(Int(level.rawValue), name, text)
            } else {
                FileHandle.standardError.write(Data("cortado: plugin \(name) [\(tag)]: \(text)\n".utf8))
            }
        }))
        return host
    }
}
