import CortadoCore
import Foundation

extension ServedModel {
    /// Runs prediction jobs on the calling (worker) thread and answers each call. Jobs whose
    /// client left or whose deadline passed are answered without running; each job's columns
    /// are decoded and checked here, off the loop thread. Consecutive jobs run as one model
    /// execution of up to `maxRows` rows (their columns concatenated; a larger job runs alone),
    /// and each job is answered from its rows of the output columns (views, no copy); when an
    /// execution of several jobs fails, each job runs again alone, so a bad row fails only its
    /// own call. Errors are sent at once; the answers are returned, to be sent once the caller
    /// gave the model's slot back.
    func execute<Jobs: Collection<PredictionJob>>(_ jobs: Jobs, maxRows: Int = 1) -> PendingAnswers {
        // One clock reading ends each step and starts the next (the clock is read ~4 times a
        // call, not 6).
        var now = DispatchTime.now().uptimeNanoseconds
        var answers = PendingAnswers()
        if jobs.count == 1 {
            // The common case without a batcher: no grouping to do.
            let job = jobs.first!
            if let (columns, queued, input) = prepare(job, clock: &now) {
                runAlone(job, columns: columns, queued: queued, input: input, began: now, into: &answers, spans: job.computeSpans())
            }
            return answers
        }
        var ready: [(job: PredictionJob, columns: MLFeatureColumns, queued: UInt64, input: UInt64)] = []
        ready.reserveCapacity(jobs.count)
        for job in jobs {
            if let (columns, queued, input) = prepare(job, clock: &now) { ready.append((job, columns, queued, input)) }
        }
        var start = 0
        while start < ready.count {
            var end = start + 1
            var rows = ready[start].columns.count
            while end < ready.count && rows + ready[end].columns.count <= maxRows {
                rows += ready[end].columns.count
                end += 1
            }
            let group = ready[start..<end]
            start = end
            // Traced jobs of the group share the execution's spans.
            let spans = group.lazy.compactMap { $0.job.computeSpans() }.first
            let began = now
            let outputs: MLFeatureColumns
            let backings: [String: MLMultiArray]?
            do {
                let inputs = group.count == 1 ? group.first!.columns : try MLFeatureColumns.concatenating(group.map(\.columns))
                (outputs, backings) = try predict(inputs, spans: spans)
            } catch {
                if group.count == 1 {
                    group.first!.job.fail(ServeStatus(for: error), statistics: statistics)
                } else {
                    // Some row failed (or the jobs' columns do not stack): each job alone, so
                    // only the bad one fails.
                    for entry in group {
                        runAlone(entry.job, columns: entry.columns, queued: entry.queued, input: entry.input, into: &answers)
                    }
                }
                now = DispatchTime.now().uptimeNanoseconds
                continue
            }
            now = DispatchTime.now().uptimeNanoseconds
            let infer = now - began
            statistics.recordExecution(rows: rows, nanoseconds: infer)
            var offset = 0
            for entry in group {
                let count = entry.columns.count
                let share = group.count == 1 ? outputs : outputs.rows(offset..<offset + count)
                offset += count
                answer(entry.job, share, queued: entry.queued, input: entry.input, infer: infer, clock: &now, into: &answers,
                       compute: spans?.spans ?? [])
            }
            // The responses were written from the pooled arrays: they can be reused.
            if let backings { outputPool?.checkIn(backings) }
        }
        return answers
    }

    /// A job's columns, decoded and checked, with the time it queued and the time decoding
    /// took; nil when it was answered instead (skipped or failed). `clock`: the time decoding
    /// starts, read by the caller; set to the time it ended.
    private func prepare(_ job: PredictionJob, clock now: inout UInt64) -> (columns: MLFeatureColumns, queued: UInt64, input: UInt64)? {
        let started = now
        let queued = started - job.call.receivedAt
        if let reason = job.skipReason(queued: queued, now: now) {
            job.fail(reason, statistics: statistics)
            return nil
        }
        do {
            let columns = try job.decode()
            now = DispatchTime.now().uptimeNanoseconds
            return (columns, queued, now - started)
        } catch {
            job.fail(ServeStatus(for: error), statistics: statistics)
            now = DispatchTime.now().uptimeNanoseconds
            return nil
        }
    }

    private func runAlone(_ job: PredictionJob, columns: MLFeatureColumns, queued: UInt64, input: UInt64,
                          began: UInt64 = DispatchTime.now().uptimeNanoseconds, into answers: inout PendingAnswers,
                          spans: MLComputeSpans? = nil) {
        do {
            let (outputs, backings) = try predict(columns, spans: spans)
            let infer = DispatchTime.now().uptimeNanoseconds - began
            statistics.recordExecution(rows: columns.count, nanoseconds: infer)
            var clock = began + infer
            answer(job, outputs, queued: queued, input: input, infer: infer, clock: &clock, into: &answers, compute: spans?.spans ?? [])
            if let backings { outputPool?.checkIn(backings) }
        } catch {
            job.fail(ServeStatus(for: error), statistics: statistics)
        }
    }

    /// Runs the batch as one model execution (`MLModel.predictions(fromColumns:)`: kinds that
    /// run columns natively take the batch as it is, others row by row); a single
    /// row writes into pooled output arrays when the model has a pool, returned with the
    /// outputs so they go back once the answers are written. `spans`: where a traced call's
    /// models and layers are recorded (see `MLComputeSpans`).
    private func predict(_ columns: MLFeatureColumns, spans: MLComputeSpans? = nil) throws
        -> (MLFeatureColumns, backings: [String: MLMultiArray]?) {
        var plain = MLPredictionOptions()
        if let spans {
            plain.computeSpans = spans
            if spans.layers { plain.layerTimes = spans.layerTimes() }
        }
        guard columns.count == 1, let pool = outputPool else { return (try model.predictions(fromColumns: columns, options: plain), nil) }
        guard let set = pool.checkOut() else {
            let outputs = try model.predictions(fromColumns: columns, options: plain)
            pool.learn(from: outputs)
            return (outputs, nil)
        }
        var options = plain
        options.outputBackings = set
        do {
            return (try model.predictions(fromColumns: columns, options: options), set)
        } catch {
            // Not the pool's shapes after all (or a bad input): the answer without backings.
            pool.checkIn(set)
            return (try model.predictions(fromColumns: columns, options: plain), nil)
        }
    }

    /// Encodes one job's answer, counts it and adds it to `answers` (a failure is answered at
    /// once). `clock`: the time encoding starts, read by the caller; set to the time it ended.
    private func answer(_ job: PredictionJob, _ outputs: MLFeatureColumns, queued: UInt64, input: UInt64, infer: UInt64,
                        clock: inout UInt64, into answers: inout PendingAnswers, compute: [MLComputeSpans.Span] = []) {
        let began = clock
        let bytes: [UInt8]
        do {
            bytes = try job.encode(outputs)
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
