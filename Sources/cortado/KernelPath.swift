import CCortadoGemm
import Foundation

/// The kernel path the neural-network kinds run on (`cg_isa()`: the widest of avx512, avx2
/// and portable this CPU has, neon on aarch64, or the narrower one `CORTADO_ISA` asks for)
/// and the CPU's model, which `report` and `inspect` print so that figures are quoted with both.
enum KernelPath {
    static var name: String { String(cString: cg_isa_name(cg_isa())) }

    /// The "model name" line of /proc/cpuinfo ("unknown CPU" where it has none, as on aarch64).
    static let cpuModel: String = {
        guard let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown CPU" }
        for line in info.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") { return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces) }
        }
        return "unknown CPU"
    }()

    /// "avx512 on <CPU model>".
    static var summary: String { "\(name) on \(cpuModel)" }
}
