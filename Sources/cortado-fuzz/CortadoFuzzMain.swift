import CortadoFuzz
import Foundation

// Two builds of one program (fuzz/README.md), hence no main.swift (libFuzzer brings main):
// - `make fuzz` builds it with `--sanitize=fuzzer -DCORTADO_LIBFUZZER`: libFuzzer's own main
//   runs the target CORTADO_FUZZ_TARGET names, with libFuzzer's flags and corpus folders;
// - an ordinary build replays files through a target without libFuzzer
//   (`cortado-fuzz TARGET FILE|FOLDER...`), to reproduce a crash under a debugger.

#if CORTADO_LIBFUZZER
nonisolated(unsafe) var selected: CortadoFuzzTarget?

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> CInt {
    let name = ProcessInfo.processInfo.environment["CORTADO_FUZZ_TARGET"] ?? ""
    guard let target = CortadoFuzzTarget(rawValue: name) else {
        FileHandle.standardError.write(Data("set CORTADO_FUZZ_TARGET to one of: \(CortadoFuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))\n".utf8))
        exit(2)
    }
    selected = target
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    selected!.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
#else
@main
struct CortadoFuzzReplay {
    static func main() {
        let arguments = CommandLine.arguments.dropFirst()
        guard let name = arguments.first, let target = CortadoFuzzTarget(rawValue: name), arguments.count >= 2 else {
            print("usage: cortado-fuzz TARGET FILE|FOLDER...   (targets: \(CortadoFuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")))")
            exit(2)
        }
        guard CortadoFuzzTarget.isAvailable else {
            print("cortado-fuzz: the targets are compiled in debug builds only")
            exit(2)
        }
        var count = 0
        for path in arguments.dropFirst() {
            var isFolder: ObjCBool = false
            FileManager.default.fileExists(atPath: path, isDirectory: &isFolder)
            let files = isFolder.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                target.run(data)
                count += 1
            }
        }
        print("cortado-fuzz \(name): \(count) inputs, no failure")
    }
}
#endif
