import CortadoCore
import Foundation

extension ServedModel {
    /// Runs prediction jobs on the calling (worker) thread and answers each call. Jobs whose
    /// client left or whose deadline passed are answered without running; each job's rows
    /// are read (decoded and checked) here, off the loop thread. Consecutive jobs run as one
    /// model execution of up to `maxRows` rows (a larger job runs alone); when an execution
    /// of several jobs fails, each job runs again alone, so a bad row fails only its own call.
    /// Errors are sent at once; the answers are returned, to be sent once the caller gave the
    /// model's slot back.
    func execute<Jobs: Collection<PredictionJob>>(_ jobs: Jobs, maxRows: Int = 1) -> PendingAnswers {
        // One clock reading ends each step and starts the next (the clock is read ~4 times a
        // call, not 6).
        var now = DispatchTime.now().uptimeNanoseconds
        var answers = PendingAnswers()
        if jobs.count == 1 {
            // The common case without a batcher: no grouping to do.
            let job = jobs.first!
            if let (rows, queued, input) = prepare(job, clock: &now) {
                runAlone(job, rows: rows, queued: queued, input: input, began: now, into: &answers, spans: job.computeSpans())
            }
            return answers
        }
        var ready: [(job: PredictionJob, rows: [MLFeatureProvider], queued: UInt64, input: UInt64)] = []
        ready.reserveCapacity(jobs.count)
        for job in jobs {
            if let (rows, queued, input) = prepare(job, clock: &now) { ready.append((job, rows, queued, input)) }
        }
        var start = 0
        while start < ready.count {
            var end = start + 1
            var rows = ready[start].rows.count
            while end < ready.count && rows + ready[end].rows.count <= maxRows {
                rows += ready[end].rows.count
                end += 1
            }
            let group = ready[start..<end]
            start = end
            let all = group.count == 1 ? group.first!.rows : group.flatMap(\.rows)
            // Traced jobs of the group share the execution's spans.
            let spans = group.lazy.compactMap { $0.job.computeSpans() }.first
            let began = now
            let results: [MLFeatureProvider]
            let backings: [String: MLMultiArray]?
            do {
                (results, backings) = try predict(all, spans: spans)
            } catch {
                if group.count == 1 {
                    group.first!.job.fail(ServeStatus(for: error), statistics: statistics)
                } else {
                    // Some row failed: each job alone, so only the bad one fails.
                    for entry in group {
                        runAlone(entry.job, rows: entry.rows, queued: entry.queued, input: entry.input, into: &answers)
                    }
                }
                now = DispatchTime.now().uptimeNanoseconds
                continue
            }
            now = DispatchTime.now().uptimeNanoseconds
            let infer = now - began
            statistics.recordExecution(rows: all.count, nanoseconds: infer)
            var offset = 0
            for entry in group {
                let share = group.count == 1 ? results : Array(results[offset..<offset + entry.rows.count])
                offset += entry.rows.count
                answer(entry.job, share, queued: entry.queued, input: entry.input, infer: infer, clock: &now, into: &answers,
                       compute: spans?.spans ?? [])
            }
            // The responses were written from the pooled arrays: they can be reused.
            if let backings { outputPool?.checkIn(backings) }
        }
        return answers
    }

    /// A job's rows, read and checked, with the time it queued and the time reading took;
    /// nil when it was answered instead (skipped or failed). `clock`: the time reading starts,
    /// read by the caller; set to the time it ended.
    private func prepare(_ job: PredictionJob, clock now: inout UInt64) -> (rows: [MLFeatureProvider], queued: UInt64, input: UInt64)? {
        let started = now
        let queued = started - job.call.receivedAt
        if let reason = job.skipReason(queued: queued, now: now) {
            job.fail(reason, statistics: statistics)
            return nil
        }
        do {
            let rows = try job.rows()
            now = DispatchTime.now().uptimeNanoseconds
            return (rows, queued, now - started)
        } catch {
            job.fail(ServeStatus(for: error), statistics: statistics)
            now = DispatchTime.now().uptimeNanoseconds
            return nil
        }
    }

    private func runAlone(_ job: PredictionJob, rows: [MLFeatureProvider], queued: UInt64, input: UInt64,
                          began: UInt64 = DispatchTime.now().uptimeNanoseconds, into answers: inout PendingAnswers,
                          spans: MLComputeSpans? = nil) {
        do {
            let (results, backings) = try predict(rows, spans: spans)
            let infer = DispatchTime.now().uptimeNanoseconds - began
            statistics.recordExecution(rows: rows.count, nanoseconds: infer)
            var clock = began + infer
            answer(job, results, queued: queued, input: input, infer: infer, clock: &clock, into: &answers, compute: spans?.spans ?? [])
            if let backings { outputPool?.checkIn(backings) }
        } catch {
            job.fail(ServeStatus(for: error), statistics: statistics)
        }
    }

    /// Runs the rows; a single row writes into pooled output arrays when the model has a
    /// pool, returned with the results so they go back once the answers are written.
    /// `spans`: where a traced call's models and layers are recorded (see `MLComputeSpans`).
    private func predict(_ rows: [MLFeatureProvider], spans: MLComputeSpans? = nil) throws
        -> ([MLFeatureProvider], backings: [String: MLMultiArray]?) {
        if let dense, let results = try dense.predict(rows, modelName: model.name) { return (results, nil) }
        var plain = MLPredictionOptions()
        if let spans {
            plain.computeSpans = spans
            if spans.layers { plain.layerTimes = spans.layerTimes() }
        }
        switch rows.count {
        case 0: return ([], nil)
        case 1:
            guard let pool = outputPool else { return ([try model.prediction(from: rows[0], options: plain)], nil) }
            guard let set = pool.checkOut() else {
                let result = try model.prediction(from: rows[0], options: plain)
                pool.learn(from: result)
                return ([result], nil)
            }
            var options = plain
            options.outputBackings = set
            do {
                return ([try model.prediction(from: rows[0], options: options)], set)
            } catch {
                // Not the pool's shapes after all (or a bad input): the answer without backings.
                pool.checkIn(set)
                return ([try model.prediction(from: rows[0], options: plain)], nil)
            }
        default:
            let out = try model.predictions(fromBatch: MLArrayBatchProvider(array: rows), options: plain)
            return ((0..<out.count).map { out.features(at: $0) }, nil)
        }
    }

    /// Encodes one job's answer, counts it and adds it to `answers` (a failure is answered at
    /// once). `clock`: the time encoding starts, read by the caller; set to the time it ended.
    private func answer(_ job: PredictionJob, _ results: [MLFeatureProvider], queued: UInt64, input: UInt64, infer: UInt64,
                        clock: inout UInt64, into answers: inout PendingAnswers, compute: [MLComputeSpans.Span] = []) {
        let began = clock
        let bytes: [UInt8]
        do {
            bytes = try job.encode(results)
        } catch {
            job.fail(ServeStatus(for: error), statistics: statistics)
            clock = DispatchTime.now().uptimeNanoseconds
            return
        }
        let done = DispatchTime.now().uptimeNanoseconds
        clock = done
        let total = done - job.call.receivedAt
        statistics.recordRequest(total: total, queue: queued, input: input, infer: infer, output: done - began)
        job.observe(.ok, total)
        job.trace(.ok, queued: queued, input: input, infer: infer, encodeBegan: began, done: done, compute: compute)
        answers.append(job, bytes)
    }
}

/// Encoded answers waiting to be sent once the model's slot is free again (so a client that
/// got its answer finds the slot free when it calls again). One answer — the usual case,
/// without a batcher — is held without an allocation.
struct PendingAnswers {
    private var first: (job: PredictionJob, message: [UInt8])?
    private var rest: [(job: PredictionJob, message: [UInt8])] = []

    init() {}

    mutating func append(_ job: PredictionJob, _ message: [UInt8]) {
        if first == nil { first = (job, message) } else { rest.append((job, message)) }
    }

    /// Sends each answer, in order.
    func send() {
        guard let first else { return }
        Self.send(first)
        for answer in rest { Self.send(answer) }
    }

    private static func send(_ answer: (job: PredictionJob, message: [UInt8])) {
        answer.job.deliver(answer.message)
    }
}
