package workerenv

// FailuresUsed is how much of its failure budget (MaxFailures) a gang has
// spent by generation: one failure for each rendezvous generation after
// the attempt's first (each new generation replaced a gang that broke),
// less the stops generations that ended in a stop the gang agreed on
// (workers leaving on request is no failure), plus one for each worker
// process that failed before it joined any generation. Such a process
// broke no generation, but replacing it for free would let a worker that
// can never start be replaced forever. Workers count the generations (they
// cannot see processes that never joined); a launcher that replaces
// processes counts both.
func FailuresUsed(generation, first uint64, stops, lostBeforeJoining int) int {
	used := lostBeforeJoining
	if generation > first {
		used += max(int(generation-first)-stops, 0)
	}
	return used
}

// BudgetExhausted reports whether used failures are more than maxFailures
// allows; -1 (any negative number) is unlimited.
func BudgetExhausted(used, maxFailures int) bool {
	return maxFailures >= 0 && used > maxFailures
}
