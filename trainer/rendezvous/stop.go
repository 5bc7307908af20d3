package rendezvous

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Agreed stops. A generation may end on purpose rather than by a loss:
// some of its members were asked to stop (a SIGTERM from a Nomad alloc
// stop or a node drain), the gang agreed at a step boundary on who they
// are and checkpointed together, and then only those members left; the
// others join the next generation with their replacements. Such an end is
// no failure, and a gang's failure budget (every generation after the
// first counts as one failure) leaves it out. Every member of the
// generation records the stop before it finishes (Finish), so that the
// record exists before any of them joins the next generation.

// StopRecord is what RecordStop stores: the members that left.
type StopRecord struct {
	Leaving []string `json:"leaving"`
}

// RecordStop records that generation gen of run ended in a stop the gang
// agreed on, in which the members named by leaving left. The first record
// of a generation stays; every member may record it.
func RecordStop(ctx context.Context, st Store, run string, gen uint64, leaving []string) error {
	data, err := json.Marshal(StopRecord{Leaving: leaving})
	if err != nil {
		return fmt.Errorf("record stop: %w", err)
	}
	if _, _, err := st.CompareAndSet(ctx, stopKey(run, gen), data, 0); err != nil {
		return fmt.Errorf("record stop of generation %d: %w", gen, err)
	}
	return nil
}

// Stops counts the generations g of run, from <= g < to, that ended in an
// agreed stop (RecordStop).
func Stops(ctx context.Context, st Store, run string, from, to uint64) (int, error) {
	kvs, _, err := st.List(ctx, run+"/gen/")
	if err != nil {
		return 0, fmt.Errorf("list agreed stops: %w", err)
	}
	n := 0
	for _, kv := range kvs {
		if g, ok := stopGeneration(run, kv.Key); ok && g >= from && g < to {
			n++
		}
	}
	return n, nil
}

// stopGeneration parses a stop record's key and returns its generation.
func stopGeneration(run, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, run+"/gen/")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "/stopped")
	if !ok {
		return 0, false
	}
	g, err := strconv.ParseUint(num, 10, 64)
	if err != nil || stopKey(run, g) != key {
		return 0, false
	}
	return g, true
}

// MissingPeers lists the members of a's generation whose alive key is
// gone, by rank: a member that watches its generation move on learns so
// whether it lost a peer or a newcomer opened the next one.
func MissingPeers(ctx context.Context, st Store, run string, a Assignment) ([]string, error) {
	kvs, _, err := st.List(ctx, alivePrefix(run, a.Generation))
	if err != nil {
		return nil, fmt.Errorf("list members of generation %d: %w", a.Generation, err)
	}
	present := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		present[strings.TrimPrefix(kv.Key, alivePrefix(run, a.Generation))] = true
	}
	var missing []string
	for _, p := range a.Peers {
		if !present[p.ID] {
			missing = append(missing, p.ID)
		}
	}
	return missing, nil
}
