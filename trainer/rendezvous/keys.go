package rendezvous

import "fmt"

// The keys a run keeps in its rendezvous store, all under "<run>/" (on
// Nomad the job's prefix, storeuri.NomadJobPrefix, comes before that):
// spelled here and nowhere else.
//
//	<run>/state                     the gang's state (generation, members)
//	<run>/gen/<g>/alive/<member>    a member's lease in generation g
//	<run>/gen/<g>/done/<member>     a member done with generation g (Finish)
//	<run>/gen/<g>/stopped           the members that left g on purpose
//	<run>/progress                  rank 0's latest report, for readers without the storage
//	<run>/failed                    the run's failure for good
//	<run>/attempt                   the first generation of the latest attempt

// StateKey holds the gang's state document (a State).
func StateKey(run string) string { return run + "/state" }

func alivePrefix(run string, gen uint64) string { return fmt.Sprintf("%s/gen/%d/alive/", run, gen) }

func aliveKey(run string, gen uint64, id string) string { return alivePrefix(run, gen) + id }

func donePrefix(run string, gen uint64) string { return fmt.Sprintf("%s/gen/%d/done/", run, gen) }

func stopKey(run string, gen uint64) string { return fmt.Sprintf("%s/gen/%d/stopped", run, gen) }

// ProgressKey holds rank 0's latest report, one progress record (the
// storage.Record line format), for readers that do not reach the run's
// storage.
func ProgressKey(run string) string { return run + "/progress" }

// FailedKey holds a run's failure for good, for workers that do not see
// the storage it is marked in: replacements in fresh allocation
// directories, a relative storage_path.
func FailedKey(run string) string { return run + "/failed" }

// AttemptKey records the first generation of the latest attempt at the
// run. A run submitted again under the same name (a new secret: a new
// attempt) starts with its whole failure budget, though the store may
// keep the last gang's state, from whose generation the numbers go on.
func AttemptKey(run string) string { return run + "/attempt" }
