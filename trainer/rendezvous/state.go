package rendezvous

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// The rendezvous state machine. It does no I/O: Decide looks at what a
// participant knows (the run's state document and the join records of the
// generation being joined) and says what it does next. The loop in
// rendezvous.go reads, writes with compare-and-set or a transaction, and
// waits, and simply decides again after a lost race or a spurious wake-up.
//
// A member joins a generation by writing its join record, its alive key
// "<run>/gen/<g>/alive/<id>", in one transaction that also checks the state
// document is still the one it read and lists the generation's alive keys.
// Members do not contend for one document while they join: the member whose
// listing shows the gang whole writes the complete generation, with ranks,
// and the others wait for that one change. Generation 1 needs no document
// until it completes (an absent state means generation 1 is joining); a
// member that finds a complete generation it is not part of opens the next
// one, writing the document and its record in one transaction.

// Phase is where a generation stands.
type Phase string

// Phases of a generation.
const (
	// PhaseJoining: members are signing in; ranks are not assigned yet.
	PhaseJoining Phase = "joining"
	// PhaseComplete: the gang is in and ranks are assigned: WorldSize
	// members, which for an elastic gang may be fewer than it asked for.
	PhaseComplete Phase = "complete"
)

// Errors of the state machine.
var (
	// ErrWorldSizeMismatch: a member asked for a world size other than the
	// one of the generation being joined.
	ErrWorldSizeMismatch = errors.New("world size differs from the generation being joined")
	// ErrBadState: the state document is unreadable or inconsistent.
	ErrBadState = errors.New("bad rendezvous state")
)

// Participant is a member as recorded in the state: the member plus the
// incarnation (a fresh random ID per Join call) that tells a restarted
// process from the one that joined before under the same member ID.
type Participant struct {
	Member
	Incarnation string `json:"incarnation"`
}

// Joiner is a join record, the value of a member's alive key: the
// participant and the size of gang it asked for (MinSize 0: exactly
// WorldSize).
type Joiner struct {
	Participant
	WorldSize int `json:"world_size"`
	MinSize   int `json:"min_size,omitempty"`
	// Lost names the members of the generation before that this member
	// saw lost (an elastic gang re-forms without waiting for them).
	Lost []string `json:"lost,omitempty"`
}

// size is the size the record asks for.
func (j Joiner) size() Size { return sizeOf(j.MinSize, j.WorldSize) }

// sizeOf reads a stored (min, max) pair, where min 0 means exactly max.
func sizeOf(min, max int) Size {
	if min <= 0 {
		min = max
	}
	return Size{Min: min, Max: max}
}

// State is the run's state document, stored as JSON at "<run>/state".
type State struct {
	Generation uint64 `json:"generation"`
	Phase      Phase  `json:"phase"`
	// WorldSize is the most members a joining generation takes; of a
	// complete one, how many it has.
	WorldSize int `json:"world_size"`
	// MinSize is the fewest members an elastic joining generation
	// completes with (0: exactly WorldSize).
	MinSize int `json:"min_size,omitempty"`
	// Prev names the members of the complete generation an elastic
	// joining generation follows. It completes short of WorldSize only
	// with one of them: a newcomer alone must not start a second gang
	// beside the one still training towards its checkpoint.
	Prev []string `json:"prev,omitempty"`
	// Members of a complete generation, in join order. For a joining
	// generation the alive keys are the record; Members lists those seen
	// so far for observers, folded in (Fold) when the gang does not
	// complete at once.
	Members []Participant `json:"members"`
	Ranks   []string      `json:"ranks,omitempty"` // member IDs, index = rank; set when complete
}

// Action is what a participant does next.
type Action int

// Actions Decide returns.
const (
	// ActionWrite: compare-and-set Decision.Next over the state read.
	ActionWrite Action = iota + 1
	// ActionWait: wait until the state changes, then decide again.
	ActionWait
	// ActionDone: the participant is in a complete generation.
	ActionDone
	// ActionJoin: in one transaction, check the state is still the one
	// read (or, when Decision.Open, compare-and-set Decision.Next over
	// it), write the join record of Decision.Generation and list that
	// generation's records.
	ActionJoin
)

func (a Action) String() string {
	switch a {
	case ActionWrite:
		return "write"
	case ActionWait:
		return "wait"
	case ActionDone:
		return "done"
	case ActionJoin:
		return "join"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is Decide's answer.
type Decision struct {
	Action     Action
	Next       State  // ActionWrite; ActionJoin when Open
	Generation uint64 // ActionJoin: the generation to sign in to
	Open       bool   // ActionJoin: the transaction writes Next
}

// View is what a participant knows when it decides.
type View struct {
	// State is the state document read (nil: absent).
	State *State
	// Listed is the generation whose join records Joiners holds, in join
	// order (0: none listed yet).
	Listed  uint64
	Joiners []Joiner
	// Signed is the generation whose join record the participant wrote
	// (0: none).
	Signed uint64
	// Settled says that the listing of generation Listed has shown at
	// least the minimum of an elastic gang for the settle time (the join
	// loop keeps the time): the gang completes with those it has.
	Settled bool
}

// joining returns the generation a view's state leaves open for joining:
// 1 when there is no state, that of a joining state; 0 for a complete one.
func (v View) joining() uint64 {
	switch {
	case v.State == nil:
		return 1
	case v.State.Phase == PhaseJoining:
		return v.State.Generation
	}
	return 0
}

// Eligible returns the join records listed for the generation v's state
// leaves open that count towards it, in join order: those asking for the
// generation's size (for generation 1 without a state: the size of the
// earliest record). Nil when none were listed for it.
func (v View) Eligible() []Joiner {
	g := v.joining()
	if g == 0 || v.Listed != g || len(v.Joiners) == 0 {
		return nil
	}
	size := v.Joiners[0].size()
	if v.State != nil {
		size = v.State.size()
	}
	var out []Joiner
	for _, j := range v.Joiners {
		if j.size() == size {
			out = append(out, j)
		}
	}
	return out
}

// Decide says what participant me does next, given what it knows, when it
// wants a gang of size (Max members, or Min..Max for an elastic gang).
//
//   - a complete generation with me (same incarnation) in it: done;
//   - a complete generation without me, e.g. I restarted: open the next
//     generation with me signed in; the members of the old one see the
//     generation move on and join again;
//   - a joining generation (generation 1 when there is no state) that I
//     have not signed in to: sign in;
//   - signed in, and the listing shows size.Max members: write the
//     complete generation (the first size.Max records in join order),
//     ranks assigned;
//   - signed in to an elastic gang whose listing has shown at least
//     size.Min members for the settle time (View.Settled): write the
//     complete generation of those members, without waiting for more;
//   - signed in otherwise: wait.
//
// A gang that lost members goes on this way at a smaller size; a member
// that comes later finds a complete generation without it and opens the
// next one, which the gang joins at its next checkpoint to grow again.
func Decide(v View, me Participant, size Size) (Decision, error) {
	if err := size.Check(); err != nil {
		return Decision{}, err
	}
	cur := v.State
	if cur != nil {
		if err := cur.validate(); err != nil {
			return Decision{}, err
		}
		switch cur.Phase {
		case PhaseComplete:
			if i := cur.index(me.ID); i >= 0 && cur.Members[i].Incarnation == me.Incarnation {
				return Decision{Action: ActionDone}, nil
			}
			g := cur.Generation + 1
			return Decision{Action: ActionJoin, Generation: g, Open: true, Next: openGeneration(g, me, size, cur.Ranks)}, nil
		case PhaseJoining:
			if cur.size() != size {
				return Decision{}, fmt.Errorf("%w: generation %d has %v, I want %v",
					ErrWorldSizeMismatch, cur.Generation, cur.size(), size)
			}
		default:
			return Decision{}, fmt.Errorf("%w: unknown phase %q", ErrBadState, cur.Phase)
		}
	}
	g := v.joining()
	if v.Signed != g {
		return Decision{Action: ActionJoin, Generation: g}, nil
	}
	js := v.Eligible()
	if cur == nil && len(js) > 0 && js[0].size() != size {
		return Decision{}, fmt.Errorf("%w: generation 1 has %v, I want %v",
			ErrWorldSizeMismatch, js[0].size(), size)
	}
	var prev []string
	if cur != nil {
		prev = cur.Prev
	}
	switch {
	case len(js) >= size.Max:
		next := newJoining(g, size, participants(js[:size.Max]), prev)
		next.completeIfFull()
		return Decision{Action: ActionWrite, Next: next}, nil
	case size.Elastic() && len(js) >= size.Min && (v.Settled && anyOf(js, prev) || accounted(js, prev)):
		next := newJoining(g, size, participants(js), prev)
		next.complete()
		return Decision{Action: ActionWrite, Next: next}, nil
	}
	return Decision{Action: ActionWait}, nil
}

// accounted reports whether every member of the generation before (prev)
// has either signed in to js or been seen lost by one who did: the
// survivors of a loss are all there, and need wait for nobody.
func accounted(js []Joiner, prev []string) bool {
	if len(prev) == 0 {
		return false
	}
	in := map[string]bool{}
	for _, j := range js {
		in[j.ID] = true
		for _, id := range j.Lost {
			in[id] = true
		}
	}
	for _, id := range prev {
		if !in[id] {
			return false
		}
	}
	return true
}

// anyOf reports whether a record of js is one of the members named by
// prev, or prev names none.
func anyOf(js []Joiner, prev []string) bool {
	for _, j := range js {
		if slices.Contains(prev, j.ID) {
			return true
		}
	}
	return len(prev) == 0
}

// newJoining is a joining generation of size with members signed in; an
// elastic one remembers the members of the generation before (prev).
func newJoining(g uint64, size Size, members []Participant, prev []string) State {
	s := State{Generation: g, Phase: PhaseJoining, WorldSize: size.Max, Members: members}
	if size.Elastic() {
		s.MinSize = size.Min
		s.Prev = prev
	}
	return s
}

// size is the size a joining generation asks for.
func (s *State) size() Size { return sizeOf(s.MinSize, s.WorldSize) }

// Folder reports whether participant me records, for observers (a
// launcher watching a gang re-form), the members signed in so far to the
// joining generation in the state document (Fold) while the gang is
// incomplete: it is signed in and has the smallest ID among the eligible
// records it listed.
func (v View) Folder(me Participant) bool {
	g := v.joining()
	if g == 0 || v.Signed != g {
		return false
	}
	js := v.Eligible()
	for _, j := range js {
		if j.ID < me.ID {
			return false
		}
	}
	return len(js) > 0
}

// Fold returns the state that records the members signed in so far, for
// the Folder to compare-and-set, and false when there is nothing to record:
// the document lists them already, or they complete the gang (Decide
// writes that).
func Fold(v View, me Participant) (State, bool) {
	if !v.Folder(me) {
		return State{}, false
	}
	js := v.Eligible()
	size := js[0].size()
	if v.State != nil {
		size = v.State.size()
	}
	members := participants(js)
	if len(members) >= size.Max || (v.State != nil && slices.Equal(v.State.Members, members)) {
		return State{}, false
	}
	var prev []string
	if v.State != nil {
		prev = v.State.Prev
	}
	return newJoining(v.joining(), size, members, prev), true
}

// joined says which generation the view leaves open and how many members
// are known to have signed in to it (0, 0 for a complete one).
func (v View) joined() (gen uint64, n int) {
	gen = v.joining()
	switch {
	case gen == 0:
		return 0, 0
	case v.Listed == gen:
		return gen, len(v.Eligible())
	case v.State != nil:
		return gen, len(v.State.Members)
	}
	return gen, 0
}

func participants(js []Joiner) []Participant {
	out := make([]Participant, len(js))
	for i, j := range js {
		out[i] = j.Participant
	}
	return out
}

// Withdraw takes participant me out of a joining generation (a join that
// gave up). ok is false when there is nothing to withdraw.
func Withdraw(cur *State, me Participant) (next State, ok bool) {
	if cur == nil || cur.Phase != PhaseJoining {
		return State{}, false
	}
	i := cur.index(me.ID)
	if i < 0 || cur.Members[i].Incarnation != me.Incarnation {
		return State{}, false
	}
	next = cur.clone()
	next.Members = append(next.Members[:i], next.Members[i+1:]...)
	return next, true
}

func openGeneration(gen uint64, me Participant, size Size, prev []string) State {
	s := newJoining(gen, size, []Participant{me}, prev)
	s.completeIfFull()
	return s
}

func (s *State) completeIfFull() {
	if len(s.Members) == s.WorldSize {
		s.complete()
	}
}

// complete assigns ranks to the members and completes the generation at
// their number.
func (s *State) complete() {
	s.WorldSize, s.MinSize, s.Prev = len(s.Members), 0, nil
	peers := AssignRanks(s.members())
	s.Ranks = make([]string, len(peers))
	for r, p := range peers {
		s.Ranks[r] = p.ID
	}
	s.Phase = PhaseComplete
}

func (s *State) index(id string) int {
	for i, m := range s.Members {
		if m.ID == id {
			return i
		}
	}
	return -1
}

func (s *State) members() []Member {
	out := make([]Member, len(s.Members))
	for i, p := range s.Members {
		out[i] = p.Member
	}
	return out
}

func (s *State) clone() State {
	c := *s
	c.Members = append([]Participant(nil), s.Members...)
	c.Ranks = append([]string(nil), s.Ranks...)
	return c
}

// Peers returns the members of a complete generation in rank order.
func (s *State) Peers() ([]Member, error) {
	if s.Phase != PhaseComplete {
		return nil, fmt.Errorf("%w: generation %d is %s, not complete", ErrBadState, s.Generation, s.Phase)
	}
	peers := make([]Member, len(s.Ranks))
	for r, id := range s.Ranks {
		i := s.index(id)
		if i < 0 {
			return nil, fmt.Errorf("%w: rank %d names unknown member %q", ErrBadState, r, id)
		}
		peers[r] = s.Members[i].Member
	}
	return peers, nil
}

// validate checks what Decide relies on.
func (s *State) validate() error {
	if s.Generation == 0 || s.WorldSize < 1 || len(s.Members) > s.WorldSize || s.MinSize < 0 || s.MinSize > s.WorldSize {
		return fmt.Errorf("%w: generation %d, world size %d, %d members",
			ErrBadState, s.Generation, s.WorldSize, len(s.Members))
	}
	seen := make(map[string]bool, len(s.Members))
	for _, m := range s.Members {
		if seen[m.ID] {
			return fmt.Errorf("%w: member %q twice", ErrBadState, m.ID)
		}
		seen[m.ID] = true
	}
	if s.Phase == PhaseComplete {
		if len(s.Members) != s.WorldSize || len(s.Ranks) != s.WorldSize {
			return fmt.Errorf("%w: complete generation %d has %d members and %d ranks for world size %d",
				ErrBadState, s.Generation, len(s.Members), len(s.Ranks), s.WorldSize)
		}
		ranked := make(map[string]bool, len(s.Ranks))
		for _, id := range s.Ranks {
			if ranked[id] {
				return fmt.Errorf("%w: member %q holds two ranks", ErrBadState, id)
			}
			ranked[id] = true
		}
		if _, err := s.Peers(); err != nil {
			return err
		}
	}
	return nil
}

// decodeState parses a stored state; an absent key gives nil.
func decodeState(v Value) (*State, error) {
	if v.Version == 0 {
		return nil, nil
	}
	var s State
	if err := json.Unmarshal(v.Data, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	return &s, nil
}
