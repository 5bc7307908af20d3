package rendezvous

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeState: the state document and the join records come from the
// store, where any member (or anyone with write access to the keys) puts
// them. Whatever the bytes, decoding, deciding and checking for a loss must
// not panic, and a document that decodes and validates must survive a
// round trip through its own encoding.
func FuzzDecodeState(f *testing.F) {
	complete := State{Generation: 3, Phase: PhaseComplete, WorldSize: 2,
		Members: []Participant{{Member: Member{ID: "a", Node: "n1", Addr: "10.0.0.1:1", RankHint: 0}, Incarnation: "x"},
			{Member: Member{ID: "b", Node: "n2", Addr: "10.0.0.2:1", RankHint: NoRankHint}, Incarnation: "y"}},
		Ranks: []string{"a", "b"}}
	joining := State{Generation: 4, Phase: PhaseJoining, WorldSize: 2, Members: complete.Members[:1]}
	elastic := State{Generation: 5, Phase: PhaseJoining, WorldSize: 3, MinSize: 2, Members: complete.Members[:1], Prev: []string{"a", "b"}}
	for _, s := range []State{complete, joining, elastic} {
		b, _ := json.Marshal(s)
		f.Add(b, []byte(`{"id":"b","node":"n2","addr":"10.0.0.2:1","rank_hint":-1,"incarnation":"z","world_size":2}`))
		f.Add(b, []byte(`{"id":"b","node":"n2","addr":"10.0.0.2:1","rank_hint":-1,"incarnation":"z","world_size":3,"min_size":1,"lost":["a"]}`))
	}
	f.Add([]byte(`{"generation":1,"phase":"complete","world_size":1,"members":[],"ranks":["a","a"]}`), []byte(`{}`))
	f.Add([]byte(`null`), []byte(`[]`))
	me := Participant{Member: Member{ID: "b", Node: "n2", Addr: "10.0.0.2:1", RankHint: NoRankHint}, Incarnation: "z"}
	f.Fuzz(func(t *testing.T, state, joiner []byte) {
		st, err := decodeState(Value{Data: state, Version: 7})
		if err != nil {
			return
		}
		joiners, _ := decodeJoiners([]KeyValue{{Key: "r/gen/4/alive/b", Data: joiner, Version: 9}})
		view := View{State: st, Listed: 4, Joiners: joiners}
		_, _ = Decide(view, me, Fixed(2))
		view.Settled = true
		_, _ = Decide(view, me, Size{Min: 1, Max: 3})
		_, _ = Fold(view, me)
		_ = view.Folder(me)
		a := Assignment{Generation: st.Generation}
		if peers, err := st.Peers(); err == nil {
			a.Peers = peers
		}
		CheckLoss("r", a, []KeyValue{{Key: "r/state", Data: state, Version: 7}})
		if st.validate() != nil {
			return
		}
		again, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("a valid state does not encode: %v", err)
		}
		back, err := decodeState(Value{Data: again, Version: 1})
		if err != nil || back.validate() != nil {
			t.Fatalf("a valid state does not survive a round trip: %v", err)
		}
	})
}
