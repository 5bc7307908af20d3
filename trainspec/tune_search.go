package trainspec

import (
	"encoding/json"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// TuneSearcher is the tune block's search_alg: the searcher's type and
// its settings. The searcher owns its settings: this package hands them
// over as JSON and reports what ParseOptions.CheckSearcher finds wrong at
// the setting's place in the file. It is written either as an attribute,
// search_alg = "tpe", or as a block with settings:
//
//	search_alg {
//	  type             = "tpe"
//	  n_startup_trials = 10
//	}
type TuneSearcher struct {
	Type string // the searcher attribute's value ("random") when absent
	// SettingsJSON is the block's other attributes as one JSON object,
	// or nil.
	SettingsJSON []byte `json:",omitempty"`
}

// tuneSearchAlg decodes the tune block's search_alg, in either form. The
// older searcher attribute ("random" or "grid") is kept; with search_alg
// too it is an error. The searcher's check needs the tune block's metric:
// it is skipped when that is wrong (metricOK false).
func (d *decoder) tuneSearchAlg(c *hcl.BodyContent, metric string, metricOK bool, searcher *hcl.Attribute, legacy *string) TuneSearcher {
	var check func(kind string, settings []byte) error
	if d.checkSearcher != nil && metricOK {
		check = func(kind string, settings []byte) error { return d.checkSearcher(kind, metric, settings) }
	}
	s := TuneSearcher{Type: *legacy}
	attr, block := c.Attributes["search_alg"], d.single(c, "search_alg")
	switch {
	case attr != nil && block != nil:
		d.rangeErrorf(attr.Range, "Duplicate search_alg", "Set search_alg once: as an attribute or as a block.")
		return s
	case (attr != nil || block != nil) && searcher != nil:
		d.rangeErrorf(searcher.Range, "Conflicting searcher", "search_alg replaces searcher: set only search_alg.")
		return s
	case block != nil:
		s.Type, s.SettingsJSON = d.typedBlock(block, "search_alg", `type = "tpe"`, check)
		*legacy = s.Type
	case attr != nil:
		if !d.nonEmpty(attr, &s.Type) {
			return s
		}
		*legacy = s.Type
		if check != nil {
			for _, err := range splitJoined(check(s.Type, nil)) {
				d.rangeErrorf(attr.Expr.Range(), "Invalid search_alg", "%s.", capitalize(err.Error()))
			}
		}
	}
	return s
}

// gridSearchTaken reports each grid_search in config (attr, and its JSON)
// when the searcher does not take one (ParseOptions.CheckGridSearch): TPE
// would otherwise sample it as a choice and run one trial where the spec
// asked for the grid. A grid_search that comes from a variable is
// reported at the config.
func (d *decoder) gridSearchTaken(attr *hcl.Attribute, searcher string, config []byte) {
	if d.checkGridSearch == nil || searcher == "" {
		return
	}
	err := d.checkGridSearch(searcher)
	if err == nil {
		return
	}
	var calls []hcl.Range
	if expr, ok := attr.Expr.(hclsyntax.Expression); ok {
		hclsyntax.VisitAll(expr, func(n hclsyntax.Node) hcl.Diagnostics {
			if call, ok := n.(*hclsyntax.FunctionCallExpr); ok && call.Name == "grid_search" {
				calls = append(calls, call.Range())
			}
			return nil
		})
	}
	var v any
	if len(calls) == 0 && json.Unmarshal(config, &v) == nil && findSearchSpace(v, "grid_search") != "" {
		calls = append(calls, attr.Expr.Range())
	}
	for _, rng := range calls {
		d.rangeErrorf(rng, "Grid search with this searcher", "%s.", capitalize(err.Error()))
	}
}

// tuneCheckpointDefault makes each trial of an experiment keep one
// checkpoint unless the run block's checkpoint sets num_to_keep (0 keeps
// all): a small experiment left hundreds per trial.
func tuneCheckpointDefault(c *hcl.BodyContent, r *Run) {
	for _, rb := range c.Blocks {
		if rb.Type != "run" {
			continue
		}
		rc, _, _ := rb.Body.PartialContent(runSchema)
		for _, cb := range rc.Blocks {
			if cb.Type != "checkpoint" {
				continue
			}
			if cc, _, _ := cb.Body.PartialContent(checkpointSchema); cc.Attributes["num_to_keep"] != nil {
				return
			}
		}
	}
	r.Checkpoint.NumToKeep = 1
}
