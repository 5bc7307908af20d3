package trainer

// SetProbeView makes rank see the file system rooted at root, as a worker
// on another node would, when it reads back rank 0's storage probe.
func SetProbeView(rank int, root string) {
	prev := readProbe
	readProbe = func(r int, path string) ([]byte, error) {
		if r == rank {
			return prev(r, root+path)
		}
		return prev(r, path)
	}
}

// SetNodeCaches gives each rank the base of its node's cache directories
// (object stores), so that one machine's ranks act as several nodes'.
func SetNodeCaches(base func(rank int) string) { nodeCacheBase = base }

// SetOnMetrics has Fit tell fn the workers' metrics URLs, until the test
// ends.
func SetOnMetrics(t interface{ Cleanup(func()) }, fn func(urls []string)) {
	old := onMetrics
	onMetrics = fn
	t.Cleanup(func() { onMetrics = old })
}

// SetBeforeResult runs fn in Fit before the Result is read, until the
// test ends.
func SetBeforeResult(t interface{ Cleanup(func()) }, fn func()) {
	old := beforeResult
	beforeResult = fn
	t.Cleanup(func() { beforeResult = old })
}
