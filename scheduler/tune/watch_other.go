//go:build !linux

package tune

// dirWatcher is Linux-only; elsewhere the tuner polls.
type dirWatcher struct{}

func newDirWatcher() *dirWatcher               { return nil }
func (w *dirWatcher) add(string)               {}
func (w *dirWatcher) remove(string)            {}
func (w *dirWatcher) changed() <-chan struct{} { return nil }
func (w *dirWatcher) close()                   {}
