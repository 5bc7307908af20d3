package rendezvous

import (
	"context"
	"fmt"
	"strings"
)

// The finish barrier. When a member's work is done it must not simply
// leave: a peer still finishing would see its alive key vanish (or its
// sockets close) and take the gang for broken. Finish records the member as
// done in the store, where the record outlives the member, and waits until
// every member of the generation is done, or one is lost without being
// done. The store carries the barrier, so nothing depends on the order in
// which members close their connections.

// Finish marks this member done with the generation and waits until all
// members are, or reports the loss of one that is not (a *LostError), or
// ctx ends. After it returns nil the member may Leave and exit.
func (s *Session) Finish(ctx context.Context) error {
	prefix := donePrefix(s.run, s.assign.Generation)
	if _, _, err := s.st.CompareAndSet(ctx, prefix+s.me.ID, []byte(s.me.Incarnation), 0); err != nil {
		return fmt.Errorf("finish: mark done: %w", err)
	}
	var idx uint64
	for {
		kvs, next, err := s.st.WaitPrefix(ctx, s.run+"/gen/", idx)
		if err != nil {
			return fmt.Errorf("finish: %w", err)
		}
		idx = next
		done, lost := CheckFinished(s.run, s.assign, kvs)
		if done {
			return nil
		}
		if lost != "" {
			return &LostError{Event: LostEvent{Generation: s.assign.Generation, Reason: ReasonMemberLost, Member: lost, Missing: []string{lost}}}
		}
	}
}

// LostError is returned by Finish when a member was lost before it was done.
type LostError struct{ Event LostEvent }

func (e *LostError) Error() string { return "finish: " + e.Event.String() }

// CheckFinished looks at the keys under "<run>/gen/" and says whether every
// member of a's generation is done, or names a member that is neither done
// nor alive.
func CheckFinished(run string, a Assignment, kvs []KeyValue) (done bool, lost string) {
	donePfx, alivePfx := donePrefix(run, a.Generation), alivePrefix(run, a.Generation)
	isDone, isAlive := map[string]bool{}, map[string]bool{}
	for _, kv := range kvs {
		switch {
		case strings.HasPrefix(kv.Key, donePfx):
			isDone[strings.TrimPrefix(kv.Key, donePfx)] = true
		case strings.HasPrefix(kv.Key, alivePfx):
			isAlive[strings.TrimPrefix(kv.Key, alivePfx)] = true
		}
	}
	done = true
	for _, p := range a.Peers {
		switch {
		case isDone[p.ID]:
		case isAlive[p.ID]:
			done = false
		default:
			return false, p.ID
		}
	}
	return done, ""
}
