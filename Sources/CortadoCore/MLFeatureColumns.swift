import Foundation

/// One feature for every row of a batch, rows along the first axis.
public enum MLFeatureColumn: @unchecked Sendable {
    /// A multi-array feature: one array of shape [rows] + the row's shape (may point into bytes the
    /// batch does not own: see MLFeatureColumns.owners).
    case arrays(MLMultiArray)
    /// A Double feature, one per row.
    case doubles([Double])
    /// An Int64 feature, one per row.
    case int64s([Int64])
    /// Any other feature (strings, dictionaries, images, sequences; `MLFeatureValue.undefined`
    /// for an optional input left out): one value per row.
    case values([MLFeatureValue])
}

/// A batch held by feature rather than by row (what a codec decodes a request into, and what a
/// model writes its outputs as). Also an MLBatchProvider: `features(at:)` gives row views, so code
/// that knows only rows still works.
///
/// Row views of an `.arrays` column (`value(_:row:)`, `rows(_:)`) are arrays over the column's
/// memory that hold this batch, and so its `owners`, alive: a view outlives nothing it reads.
public final class MLFeatureColumns: MLBatchProvider, @unchecked Sendable {
    public let count: Int
    /// Kept alive as long as the columns (request bytes, the batch a view was cut from).
    public var owners: [AnyObject]
    /// The one owner most batches have, held without a list (see `init(count:owner:capacity:)`).
    private let owner: AnyObject?
    /// The columns with their names, in insertion order: one list, so a batch of k features
    /// costs one allocation, not two.
    private var entries: [Entry] = []

    private struct Entry {
        let name: String
        var column: MLFeatureColumn
    }

    /// The features' names, in insertion order.
    public var names: [String] { entries.map(\.name) }

    public convenience init(count: Int, owners: [AnyObject] = []) {
        self.init(count: count, owners: owners, capacity: 0)
    }

    /// `capacity`: how many features will be set (room made once).
    public init(count: Int, owners: [AnyObject] = [], capacity: Int) {
        self.count = count
        self.owners = owners
        self.owner = nil
        if capacity > 0 { entries.reserveCapacity(capacity) }
    }

    /// A batch kept alive with one owner (no owners list to allocate).
    public init(count: Int, owner: AnyObject, capacity: Int = 0) {
        self.count = count
        self.owners = []
        self.owner = owner
        if capacity > 0 { entries.reserveCapacity(capacity) }
    }

    /// The same columns (shared, not copied) in a batch of their own, to add to or replace in
    /// without touching `other`; `other` is among its owners.
    public convenience init(copying other: MLFeatureColumns) {
        self.init(count: other.count, owner: other)
        entries = other.entries
    }

    /// Sets a feature's column (replacing one of the same name, else appended to `names`).
    public func set(_ name: String, _ column: MLFeatureColumn) {
        for i in entries.indices where entries[i].name == name {
            entries[i].column = column
            return
        }
        entries.append(Entry(name: name, column: column))
    }

    /// Appends the column of a feature the batch does not hold yet, without looking for the name
    /// first (a caller that knows its names are distinct: a request's inputs, each checked once;
    /// with many features, `set`'s scan makes a batch quadratic in their count).
    public func add(_ name: String, _ column: MLFeatureColumn) {
        entries.append(Entry(name: name, column: column))
    }

    public func column(_ name: String) -> MLFeatureColumn? {
        // Few features: a scan beats hashing the name.
        for i in entries.indices where entries[i].name == name { return entries[i].column }
        return nil
    }

    /// `column(name)`, looked for at position `hint` first: callers that walk a model's inputs
    /// in declared order find the columns of a batch decoded in that order without a scan.
    public func column(_ name: String, hint: Int) -> MLFeatureColumn? {
        if hint < entries.count && entries[hint].name == name { return entries[hint].column }
        return column(name)
    }

    /// One row's value (arrays: a view, no copy); nil for a feature the batch lacks or a row
    /// out of range.
    public func value(_ name: String, row: Int) -> MLFeatureValue? {
        guard let column = column(name) else { return nil }
        return value(of: column, row: row)
    }

    /// One row's value of `column`, a column of this batch (found once by the caller, not
    /// looked up by name for every row); nil for a row out of range.
    public func value(of column: MLFeatureColumn, row: Int) -> MLFeatureValue? {
        guard row >= 0, row < count else { return nil }
        switch column {
        case .arrays(let array):
            guard let view = try? Self.view(array, rows: row..<(row + 1), dropRowAxis: true, owner: self) else { return nil }
            return MLFeatureValue(multiArray: view)
        case .doubles(let v): return MLFeatureValue(double: v[row])
        case .int64s(let v): return MLFeatureValue(int64: v[row])
        case .values(let v): return v[row]
        }
    }

    public func features(at index: Int) -> MLFeatureProvider { MLFeatureColumnsRow(columns: self, row: index) }

    /// Rows [range] as a batch of their own, without copying (arrays: views into the same memory).
    public func rows(_ range: Range<Int>) -> MLFeatureColumns {
        precondition(range.lowerBound >= 0 && range.upperBound <= count, "rows \(range) of a batch of \(count)")
        let part = MLFeatureColumns(count: range.count, owner: self, capacity: entries.count)
        for entry in entries {
            let name = entry.name
            switch entry.column {
            case .arrays(let array):
                // A view's shape and strides come from its parent's: it cannot fail.
                part.set(name, .arrays(try! Self.view(array, rows: range, dropRowAxis: false, owner: self)))
            case .doubles(let v): part.set(name, .doubles(Array(v[range])))
            case .int64s(let v): part.set(name, .int64s(Array(v[range])))
            case .values(let v): part.set(name, .values(Array(v[range])))
            }
        }
        return part
    }

    /// Several batches with the same features as one (one copy per column); throws when a
    /// feature's rows differ in shape or type.
    ///
    /// Columns of one feature held in different forms (`.doubles` in one part, `.values` in
    /// another) become `.values`; `.arrays` columns must agree in row shape and data type.
    public static func concatenating(_ parts: [MLFeatureColumns]) throws -> MLFeatureColumns {
        if parts.count == 1 { return parts[0] }
        let total = parts.reduce(0) { $0 + $1.count }
        let out = MLFeatureColumns(count: total)
        guard let first = parts.first else { return out }
        for entry in first.entries {
            let name = entry.name
            var pieces: [MLFeatureColumn] = []
            pieces.reserveCapacity(parts.count)
            for part in parts {
                guard let column = part.column(name) else {
                    throw MLModelError.featureType(name, "a batch to concatenate lacks this feature")
                }
                pieces.append(column)
            }
            switch entry.column {
            case .arrays(let a0):
                let rowShape = Array(a0.shape.dropFirst())
                var arrays: [MLMultiArray] = []
                for piece in pieces {
                    guard case .arrays(let a) = piece else { arrays = []; break }
                    guard Array(a.shape.dropFirst()) == rowShape else {
                        throw MLModelError.featureType(name, "rows of shape \(Array(a.shape.dropFirst())) and \(rowShape) cannot make one batch")
                    }
                    guard a.dataType == a0.dataType else {
                        throw MLModelError.featureType(name, "rows of \(a.dataType) and \(a0.dataType) cannot make one batch")
                    }
                    arrays.append(a)
                }
                if arrays.count == parts.count {
                    let joined = try MLMultiArray(shape: [total] + rowShape, dataType: a0.dataType)
                    var at = 0
                    for a in arrays {
                        copyRows(a, into: joined, at: at)
                        at += a.shape.first ?? 0
                    }
                    out.set(name, .arrays(joined))
                    continue
                }
            case .doubles:
                var all: [Double] = []
                for piece in pieces { guard case .doubles(let v) = piece else { all = []; break }; all += v }
                if all.count == total { out.set(name, .doubles(all)); continue }
            case .int64s:
                var all: [Int64] = []
                for piece in pieces { guard case .int64s(let v) = piece else { all = []; break }; all += v }
                if all.count == total { out.set(name, .int64s(all)); continue }
            case .values:
                break
            }
            // Forms differ: every row's own value.
            var values: [MLFeatureValue] = []
            values.reserveCapacity(total)
            for part in parts {
                for r in 0..<part.count { values.append(part.value(name, row: r)!) }
            }
            if let shape = values.first?.multiArrayValue?.shape,
               let odd = values.first(where: { $0.multiArrayValue.map { $0.shape != shape } ?? false }) {
                throw MLModelError.featureType(name, "rows of shape \(odd.multiArrayValue!.shape) and \(shape) cannot make one batch")
            }
            out.set(name, .values(values))
        }
        out.owners = parts
        return out
    }

    /// Stacks per-row providers into columns (arrays of one shape and type become `.arrays`;
    /// doubles/int64 `.doubles`/`.int64s`; anything else `.values`). `names`: the features to take.
    /// `backings`: caller arrays (shape [rows] + row shape) that `.arrays` columns are written into.
    ///
    /// A feature a row lacks is `MLFeatureValue.undefined` there (its column `.values`). Rows
    /// whose arrays already lie one after another in one block (a kind's batched output) become
    /// a column over that block without a copy, unless a backing is given.
    public convenience init(stacking rows: [MLFeatureProvider], names: [String], backings: [String: MLMultiArray] = [:]) throws {
        self.init(count: rows.count)
        for name in names {
            let values = rows.map { $0.featureValue(for: name) }
            set(name, try Self.stack(values, name: name, backing: backings[name]))
        }
    }

    /// Puts `names` in the order of `order` (names it does not list keep their order, after).
    func reorder(_ order: [String]) {
        // Mostly already in order (kinds write their outputs as declared): nothing to sort.
        var next = 0
        for entry in entries {
            while next < order.count && order[next] != entry.name { next += 1 }
            if next == order.count { break }
        }
        if next < order.count { return }
        let position = Dictionary(order.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        entries = entries.enumerated().sorted {
            (position[$0.element.name] ?? order.count + $0.offset, $0.offset) < (position[$1.element.name] ?? order.count + $1.offset, $1.offset)
        }.map(\.element)
    }

    // MARK: Helpers

    /// The row shape of an `.arrays` column's array (its shape without the row axis).
    public static func rowShape(_ array: MLMultiArray) -> [Int] { Array(array.shape.dropFirst()) }

    /// Rows `range` of `array` (rows along its first axis) as an array over the same memory,
    /// held alive by `owner`; without the row axis when `dropRowAxis` (one row).
    static func view(_ array: MLMultiArray, rows range: Range<Int>, dropRowAxis: Bool, owner: AnyObject) throws -> MLMultiArray {
        let step = array.strides.first ?? 1
        let start = array.dataPointer + range.lowerBound * step * array.dataType.size
        let shape = dropRowAxis ? Array(array.shape.dropFirst()) : [range.count] + array.shape.dropFirst()
        let strides = dropRowAxis ? Array(array.strides.dropFirst()) : array.strides
        return try MLMultiArray(dataPointer: start, shape: shape, dataType: array.dataType, strides: strides, owner: owner)
    }

    /// Copies every row of `source` into `target` from row `at` (same row shape and data type).
    static func copyRows(_ source: MLMultiArray, into target: MLMultiArray, at: Int) {
        let rowCount = source.count / Swift.max(source.shape.first ?? 1, 1)
        let offset = at * rowCount
        if source.isContiguous && target.isContiguous && source.dataType == target.dataType {
            let size = source.dataType.size
            (target.dataPointer + offset * size).copyMemory(from: source.dataPointer, byteCount: source.count * size)
        } else {
            for i in 0..<source.count { target.setDouble(source.double(at: i), at: offset + i) }
        }
    }

    /// One feature's column from its value in each row.
    private static func stack(_ values: [MLFeatureValue?], name: String, backing: MLMultiArray?) throws -> MLFeatureColumn {
        guard let first = values.first ?? nil else {
            if values.isEmpty { return .values([]) }
            return .values(fill(values))
        }
        switch first.storage {
        case .double:
            var out: [Double] = []
            out.reserveCapacity(values.count)
            for value in values {
                guard let value, case .double(let d) = value.storage else { return .values(fill(values)) }
                out.append(d)
            }
            return .doubles(out)
        case .int64:
            var out: [Int64] = []
            out.reserveCapacity(values.count)
            for value in values {
                guard let value, case .int64(let i) = value.storage else { return .values(fill(values)) }
                out.append(i)
            }
            return .int64s(out)
        case .multiArray(let a0):
            var arrays: [MLMultiArray] = []
            arrays.reserveCapacity(values.count)
            for value in values {
                guard let a = value?.multiArrayValue, a.shape == a0.shape, a.dataType == a0.dataType else { return .values(fill(values)) }
                arrays.append(a)
            }
            let shape = [values.count] + a0.shape
            if let backing {
                let target = try MLPredictionOptions.column(backing, named: name, shape: shape)
                let size = target.dataType.size
                for (r, a) in arrays.enumerated() {
                    // A kind that already wrote this row into the backing: nothing to copy.
                    if target.isContiguous && a.dataPointer == target.dataPointer + r * a0.count * size && a.dataType == target.dataType
                        && a.isContiguous { continue }
                    copyRows(oneRow(a), into: target, at: r)
                }
                return .arrays(target)
            }
            // Rows one after another in one block: one array over it, no copy.
            let size = a0.dataType.size
            if a0.isContiguous, arrays.enumerated().allSatisfy({ $1.isContiguous && $1.dataPointer == a0.dataPointer + $0 * a0.count * size }) {
                return .arrays(try MLMultiArray(dataPointer: a0.dataPointer, shape: shape, dataType: a0.dataType,
                                                strides: MLMultiArray.rowMajorStrides(shape), owner: MLArraysKeeper(arrays)))
            }
            let joined = try MLMultiArray(shape: shape, dataType: a0.dataType)
            for (r, a) in arrays.enumerated() { copyRows(oneRow(a), into: joined, at: r) }
            return .arrays(joined)
        default:
            return .values(fill(values))
        }
    }

    /// `array` seen as a batch of one row (for `copyRows`).
    private static func oneRow(_ array: MLMultiArray) -> MLMultiArray {
        (try? MLMultiArray(dataPointer: array.dataPointer, shape: [1] + array.shape, dataType: array.dataType,
                           strides: [array.count] + array.strides, owner: array)) ?? array
    }

    /// Values with an undefined one (of the type the others have) for each row that lacks it.
    private static func fill(_ values: [MLFeatureValue?]) -> [MLFeatureValue] {
        let type = values.lazy.compactMap { $0?.type }.first ?? .double
        return values.map { $0 ?? MLFeatureValue(undefined: type) }
    }
}

extension MLPredictionOptions {
    /// The array an output column of `rows` rows is written into: its backing when one was
    /// given (seen as [rows] + `shape` when it holds as many elements in another shape), else a
    /// new array of [rows] + `shape` and `dataType`.
    public func outputColumn(named name: String, rows: Int, shape: [Int], dataType: MLMultiArrayDataType) throws -> MLMultiArray {
        if !outputBackings.isEmpty, let backing = outputBackings[name] {
            return try Self.column(backing, named: name, shape: [rows] + shape)
        }
        return try MLMultiArray(shape: [rows] + shape, dataType: dataType)
    }

    /// `backing` as an array of `shape` (itself, or a view over it), or an error naming the
    /// output when it cannot be.
    static func column(_ backing: MLMultiArray, named name: String, shape: [Int]) throws -> MLMultiArray {
        if backing.shape == shape { return backing }
        let count = shape.reduce(1, *)
        guard backing.count == count else {
            throw MLModelError.featureType(name, "output backing has \(backing.count) elements, the output needs \(count) (shape \(shape))")
        }
        guard backing.isContiguous else {
            throw MLModelError.featureType(name, "output backing of shape \(backing.shape) and strides \(backing.strides) cannot be seen as shape \(shape)")
        }
        return try MLMultiArray(dataPointer: backing.dataPointer, shape: shape, dataType: backing.dataType,
                                strides: MLMultiArray.rowMajorStrides(shape), owner: backing)
    }
}

/// Holds the arrays whose memory a column spans (each row's array keeps its part alive).
private final class MLArraysKeeper {
    let arrays: [MLMultiArray]
    init(_ arrays: [MLMultiArray]) { self.arrays = arrays }
}

/// One row of an `MLFeatureColumns`, as a feature provider.
final class MLFeatureColumnsRow: MLFeatureProvider, @unchecked Sendable {
    let columns: MLFeatureColumns
    let row: Int

    init(columns: MLFeatureColumns, row: Int) {
        self.columns = columns
        self.row = row
    }

    var featureNames: Set<String> { Set(columns.names) }
    func featureValue(for featureName: String) -> MLFeatureValue? { columns.value(featureName, row: row) }
}

/// A compiled model that runs a whole columnar batch as one computation, reading its inputs from
/// the columns as they lie and writing its outputs as columns (into `options.outputBackings`,
/// keyed by output name, each of shape [rows] + the output's shape, when given).
public protocol MLColumnarPredicting: MLCompiledModel {
    func predictions(columns: MLFeatureColumns, options: MLPredictionOptions) throws -> MLFeatureColumns
}

extension MLCompiledModel {
    /// The row-by-row path over columns: `prediction(from:)` for one row, `predictions(from:)`
    /// for more, the results stacked into columns (into `options.outputBackings`, shaped
    /// [rows] + the output's shape, when given). `outputs`: the features to take, in order (nil:
    /// every feature of the first row's result, sorted by name). For kinds whose columnar path
    /// meets a batch it cannot run as one.
    public func rowPredictions(columns: MLFeatureColumns, options: MLPredictionOptions, outputs: [String]? = nil) throws -> MLFeatureColumns {
        // The backings are shaped for the whole batch: each row's results are written into them
        // when stacked, not by the kind.
        var rowOptions = options
        rowOptions.outputBackings = [:]
        let results: [MLFeatureProvider]
        switch columns.count {
        case 0: return MLFeatureColumns(count: 0)
        case 1: results = [try prediction(from: columns.features(at: 0), options: rowOptions)]
        default: results = try predictions(from: columns, options: rowOptions)
        }
        let names = outputs.map { wanted in wanted.filter { results[0].featureValue(for: $0) != nil } }
            ?? results[0].featureNames.sorted()
        return try MLFeatureColumns(stacking: results, names: names, backings: options.outputBackings)
    }
}

extension MLModelDescription {
    /// `validateInputs` for a columnar batch, column by column: the same checks and the same
    /// errors as for its rows (an `.arrays` column's row shape is checked once; a `.values`
    /// column's first bad row is reported).
    public func validateInputs(_ columns: MLFeatureColumns) throws {
        try inputs.withUnsafeBufferPointer { all in
            guard let first = all.baseAddress else { return }
            for i in all.indices {
                // Through a pointer: `all[i]` would copy the description (a retain per field) on
                // every call.
                let input = first + i
                guard let column = columns.column(input.pointee.name, hint: i) else {
                    if input.pointee.isOptional || columns.count == 0 { continue }
                    throw MLModelError.featureType(input.pointee.name, "required input is missing (expected \(input.pointee.typeSummary))")
                }
                guard columns.count > 0 else { continue }
                switch column {
                case .arrays(let array):
                    guard input.pointee.type == .multiArray else {
                        throw MLModelError.featureType(input.pointee.name, "expected \(input.pointee.typeSummary), got \(MLFeatureType.multiArray)")
                    }
                    guard array.shape.first == columns.count else {
                        throw MLModelError.featureType(input.pointee.name, "the column holds \(array.shape.first ?? 0) rows, the batch \(columns.count)")
                    }
                    // The declared shape itself (the common case) passes without a row shape made.
                    if input.pointee.isDeclaredShape(array.shape.dropFirst()) { continue }
                    try input.pointee.validateShape(MLFeatureColumns.rowShape(array))
                case .doubles(let v):
                    guard v.count == columns.count else {
                        throw MLModelError.featureType(input.pointee.name, "the column holds \(v.count) rows, the batch \(columns.count)")
                    }
                    // As `validate` takes a double (Core ML converts between the two scalars).
                    guard input.pointee.type == .double || input.pointee.type == .int64 else {
                        throw MLModelError.featureType(input.pointee.name, "expected \(input.pointee.typeSummary), got \(MLFeatureType.double)")
                    }
                case .int64s(let v):
                    guard v.count == columns.count else {
                        throw MLModelError.featureType(input.pointee.name, "the column holds \(v.count) rows, the batch \(columns.count)")
                    }
                    guard input.pointee.type == .double || input.pointee.type == .int64 else {
                        throw MLModelError.featureType(input.pointee.name, "expected \(input.pointee.typeSummary), got \(MLFeatureType.int64)")
                    }
                case .values(let values):
                    guard values.count == columns.count else {
                        throw MLModelError.featureType(input.pointee.name, "the column holds \(values.count) rows, the batch \(columns.count)")
                    }
                    // Rows of an array shape already passed need no second check.
                    var passed: [Int]?
                    for value in values { try input.pointee.validate(value, passed: &passed) }
                }
            }
        }
    }
}

extension MLModel {
    /// Predicts every row of a columnar batch. Checks the columns against the model description
    /// (same errors as row validation), runs `MLColumnarPredicting` kinds natively, and the others
    /// row by row (`prediction(from:)` for one row, `predictions(from:)` for more) with their
    /// results stacked into columns: the row-by-row path is the special case.
    ///
    /// The result's `names` follow the description's outputs.
    public func predictions(fromColumns columns: MLFeatureColumns,
                            options: MLPredictionOptions = MLPredictionOptions()) throws -> MLFeatureColumns {
        do {
            try modelDescription.validateInputs(columns)
            let out: MLFeatureColumns
            if let columnar {
                out = try columnar.predictions(columns: columns, options: options)
            } else {
                out = try compiled.rowPredictions(columns: columns, options: options, outputs: outputNames)
            }
            out.reorder(outputNames)
            return out
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }
}
