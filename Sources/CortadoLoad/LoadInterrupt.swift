import CLibUV
import CortadoGRPCClient
import Foundation

/// Ctrl-C during a run: the first SIGINT stops offering load, lets the calls in flight finish
/// and reports; a second exits at once. Watched by a `uv_signal_t` on the client's loop
/// (unreferenced: it never keeps the loop alive).
public enum LoadInterrupt {
    /// Set by the first SIGINT (loop thread only).
    public private(set) static var requested = false
    private static var handle: UnsafeMutablePointer<uv_signal_t>?

    /// Starts watching SIGINT on `loop` (once; later calls do nothing).
    public static func watch(_ loop: HTTP2ClientLoop) {
        guard handle == nil else { return }
        let sigint = UnsafeMutablePointer<uv_signal_t>.allocate(capacity: 1)
        handle = sigint
        uv_signal_init(loop.loop, sigint)
        uv_signal_start(sigint, { _, _ in
            if LoadInterrupt.requested { exit(130) }
            LoadInterrupt.requested = true
            FileHandle.standardError.write("\ncortado-load: interrupted; finishing the calls in flight (Ctrl-C again to quit)\n".data(using: .utf8)!)
        }, SIGINT)
        uv_unref(UnsafeMutableRawPointer(sigint).assumingMemoryBound(to: uv_handle_t.self))
    }
}
