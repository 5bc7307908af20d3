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
