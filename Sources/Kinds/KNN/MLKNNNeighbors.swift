/// One candidate neighbour: a sample's squared Euclidean distance to the query and its
/// index in the model's sample list.
struct MLKNNNeighbor: Sendable {
    var distance: Double
    var sample: Int

    /// The total order neighbours are ranked by: distance, then sample index. Ties in
    /// distance go to the sample that comes first in the model, so the k nearest are one
    /// well-defined set whichever index finds them.
    @inline(__always)
    static func precedes(_ a: MLKNNNeighbor, _ b: MLKNNNeighbor) -> Bool {
        a.distance < b.distance || (a.distance == b.distance && a.sample < b.sample)
    }
}

/// The k best neighbours seen so far, as a binary max-heap in caller-provided storage
/// (no allocation per query). The root is the worst of the kept ones.
struct MLKNNNeighborHeap {
    let storage: UnsafeMutablePointer<MLKNNNeighbor>
    let capacity: Int
    private(set) var count = 0

    init(storage: UnsafeMutablePointer<MLKNNNeighbor>, capacity: Int) {
        self.storage = storage
        self.capacity = capacity
    }

    var isFull: Bool { count == capacity }

    /// The worst kept neighbour (valid when not empty).
    var worst: MLKNNNeighbor { storage[0] }

    /// Offers a candidate; it is kept if there is room or it beats the worst kept one.
    @inline(__always)
    mutating func offer(_ n: MLKNNNeighbor) {
        if count < capacity {
            var i = count
            count += 1
            while i > 0 {
                let parent = (i - 1) / 2
                guard MLKNNNeighbor.precedes(storage[parent], n) else { break }
                storage[i] = storage[parent]
                i = parent
            }
            storage[i] = n
        } else if capacity > 0, MLKNNNeighbor.precedes(n, storage[0]) {
            siftDown(n)
        }
    }

    /// Replaces the root with `n` and restores the heap.
    private mutating func siftDown(_ n: MLKNNNeighbor) {
        var i = 0
        while true {
            let l = 2 * i + 1
            if l >= count { break }
            var c = l
            let r = l + 1
            if r < count, MLKNNNeighbor.precedes(storage[l], storage[r]) { c = r }
            guard MLKNNNeighbor.precedes(n, storage[c]) else { break }
            storage[i] = storage[c]
            i = c
        }
        storage[i] = n
    }

    /// Sorts the kept neighbours nearest first, in place; returns how many there are.
    mutating func sortAscending() -> Int {
        let n = count
        // Heap sort: repeatedly move the worst to the end.
        var end = n
        while end > 1 {
            end -= 1
            let worst = storage[0]
            let last = storage[end]
            count = end
            siftDown(last)
            storage[end] = worst
        }
        count = n
        return n
    }
}

/// Squared Euclidean distance, summed over the dimensions in order (the k-d tree's
/// lower bounds rely on this order to stay below the true distance in floating point).
@inline(__always)
func mlKNNSquaredDistance(_ a: UnsafePointer<Double>, _ b: UnsafePointer<Double>, _ dims: Int) -> Double {
    var s = 0.0
    for d in 0..<dims {
        let t = a[d] - b[d]
        s += t * t
    }
    return s
}
