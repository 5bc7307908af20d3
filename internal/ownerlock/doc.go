// Package ownerlock marks the scratch files and directories a process owns
// so that a later process can tell whether their owner is gone, and sweeps
// away those whose owner is.
//
// The owner holds an flock(2) on the file, or on a lock file inside the
// directory, for as long as it lives. The kernel drops the lock when the
// owner dies, however it dies (SIGKILL included), and whatever process
// later takes the same ID: a lock that can be taken marks an entry nobody
// owns. Names carry the owner's process ID (Pattern) for the reader's sake
// and so that a sweep only looks at entries named this way (PIDNamed);
// the lock, not the ID, decides.
//
//	f, err := ownerlock.CreateFile(dir, ownerlock.Pattern("myapp-", "*"))
//	...
//	defer f.Close()
//	defer os.Remove(f.Name())
//
//	// at the next start, by any process:
//	removed, err := ownerlock.Sweep(dir, ownerlock.PIDNamed("myapp-"))
package ownerlock
