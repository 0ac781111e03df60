/// The moments of an update a progress handler can ask for (CoreML.framework's
/// `MLUpdateProgressEvent`).
public struct MLUpdateProgressEvent: OptionSet, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let trainingBegin = MLUpdateProgressEvent(rawValue: 1 << 0)
    public static let epochEnd = MLUpdateProgressEvent(rawValue: 1 << 1)
    public static let miniBatchEnd = MLUpdateProgressEvent(rawValue: 1 << 2)
}

/// What an update calls as it runs (CoreML.framework's `MLUpdateProgressHandlers`): the
/// progress handler for the chosen events, and the completion handler once, at the end
/// (finished, failed or cancelled: see `MLUpdateContext.task`).
public final class MLUpdateProgressHandlers: @unchecked Sendable {
    let interestedEvents: MLUpdateProgressEvent
    let progressHandler: ((MLUpdateContext) -> Void)?
    let completionHandler: (MLUpdateContext) -> Void

    public init(forEvents interestedEvents: MLUpdateProgressEvent, progressHandler: ((MLUpdateContext) -> Void)?,
                completionHandler: @escaping (MLUpdateContext) -> Void) {
        self.interestedEvents = interestedEvents
        self.progressHandler = progressHandler
        self.completionHandler = completionHandler
    }
}

/// Where an update stands (CoreML.framework's `MLTaskState`).
public enum MLTaskState: Int, Sendable {
    case suspended = 1
    case running = 2
    case cancelling = 3
    case completed = 4
    case failed = 5
}
