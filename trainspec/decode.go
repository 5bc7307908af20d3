package trainspec

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// ParseFile reads and decodes the spec at path. All errors are returned
// together as diagnostics with source ranges; the Spec is nil when any of
// them is an error.
func ParseFile(path string, opts ParseOptions) (*Spec, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Failed to read spec",
			Detail:   fmt.Sprintf("Cannot read %s: %s.", path, err),
		}}
	}
	return Parse(src, path, opts)
}

// Parse decodes the spec in src; filename names it in diagnostics.
func Parse(src []byte, filename string, opts ParseOptions) (*Spec, hcl.Diagnostics) {
	parser := opts.Parser
	if parser == nil {
		parser = hclparse.NewParser()
	}
	file, diags := parser.ParseHCL(src, filename)
	if diags.HasErrors() {
		pointAtUnclosed(src, filename, diags)
		return nil, diags
	}
	if body, ok := file.Body.(*hclsyntax.Body); ok {
		diags = append(diags, checkLimits(body)...)
		if diags.HasErrors() {
			return nil, diags
		}
	}
	spec, ddiags := decodeFile(file, opts, parser)
	diags = append(diags, ddiags...)
	if diags.HasErrors() {
		return nil, diags
	}
	return spec, diags
}

var rootSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "train", LabelNames: []string{"name"}},
		{Type: "variable", LabelNames: []string{"name"}},
	},
}

func decodeFile(file *hcl.File, opts ParseOptions, parser *hclparse.Parser) (*Spec, hcl.Diagnostics) {
	d := &decoder{builtins: opts.Builtins, checkConfig: opts.CheckConfig, checkScheduler: opts.CheckScheduler,
		checkSearcher: opts.CheckSearcher, checkGridSearch: opts.CheckGridSearch}
	if d.builtins == nil {
		d.builtins = KnownBuiltins()
	}
	root := d.content(file.Body, rootSchema)
	vars, vdiags := decodeVariables(root.Blocks.OfType("variable"), opts, parser)
	d.diags = append(d.diags, vdiags...)
	d.ctx = &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": vars},
		Functions: Functions(),
	}
	train := d.single(root, "train")
	if train == nil {
		start := hcl.Range{Filename: file.Body.MissingItemRange().Filename, Start: hcl.InitialPos, End: hcl.InitialPos}
		d.rangeErrorf(start, "Missing train block", `A spec needs one train "<name>" {} block.`)
		return nil, d.diags
	}
	spec := d.train(train)
	hintRuntimeInterpolation(d.diags)
	return spec, d.diags
}

// unknownVariable matches hcl's detail for a reference to an undefined root
// variable.
var unknownVariable = regexp.MustCompile(`^There is no variable named "([^"]+)"\.`)

// nomadRuntimeRoots are the names Nomad interpolates when a task starts.
var nomadRuntimeRoots = []string{"attr", "device", "env", "meta", "node"}

// hintRuntimeInterpolation explains, where a spec refers to something Nomad
// interpolates at run time (${NOMAD_ALLOC_INDEX}, ${node.unique.name}), that
// the spec is evaluated first and the reference must be escaped.
func hintRuntimeInterpolation(diags hcl.Diagnostics) {
	for _, diag := range diags {
		m := unknownVariable.FindStringSubmatch(diag.Detail)
		if diag.Summary != "Unknown variable" || m == nil {
			continue
		}
		ref := m[1]
		switch {
		case strings.HasPrefix(ref, "NOMAD_"):
		case slices.Contains(nomadRuntimeRoots, ref):
			ref += ".…"
		default:
			continue
		}
		diag.Detail += fmt.Sprintf(" The spec is evaluated before Nomad sees it: to leave ${%s} for Nomad to interpolate at run time, escape it as $${%s}.", ref, ref)
	}
}

var trainSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "datacenters"}, {Name: "namespace"}, {Name: "region"}, {Name: "node_pool"},
		{Name: "priority"}, {Name: "meta"}, {Name: "env"}, {Name: "config"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "entrypoint"}, {Type: "scaling"}, {Type: "run"}, {Type: "rendezvous"}, {Type: "tune"},
		{Type: "volume", LabelNames: []string{"name"}},
	},
}

// namePattern keeps run names usable as a Nomad job ID and a directory
// name, and (through serviceLabel, with "-worker") an RFC 1123 service name.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9_-]{0,54}[a-zA-Z0-9])?$`)

// Nomad's own rules for the names of namespaces and node pools: it
// refuses a job that names another.
var (
	namespacePattern = regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`)
	nodePoolPattern  = regexp.MustCompile(`^[a-zA-Z0-9-_]{1,128}$`)
)

// nomadName decodes a Nomad object's name (attr, when set) into dst:
// pattern is what Nomad accepts, which chars says in words.
func (d *decoder) nomadName(attr *hcl.Attribute, dst *string, pattern *regexp.Regexp, chars string) {
	var name string
	if attr == nil || !d.nonEmpty(attr, &name) {
		return
	}
	if !pattern.MatchString(name) {
		d.errorf(attr, "Invalid value", "%s %q is not a name Nomad takes: 1 to 128 %s.", attr.Name, name, chars)
		return
	}
	*dst = name
}

// ReservedMetaPrefix starts the meta keys nomad-train sets itself; a spec
// may not set them. The environment variables it sets are
// workerenv.Reserved.
const ReservedMetaPrefix = "nomad_train_"

func (d *decoder) train(b *hcl.Block) *Spec {
	s := &Spec{
		Name:       b.Labels[0],
		Priority:   DefaultPriority,
		ConfigJSON: []byte("{}"),
		Scaling: Scaling{
			NumWorkers:         DefaultNumWorkers,
			ResourcesPerWorker: Resources{Cores: DefaultWorkerCores, MemoryMB: DefaultWorkerMemoryMB},
			PlacementStrategy:  PlacementPack,
		},
		Run: Run{
			StoragePath: DefaultStoragePath,
			Checkpoint:  Checkpoint{ScoreOrder: ScoreMax},
		},
		Rendezvous: Rendezvous{Timeout: DefaultRendezvousTimeout},
		ranges:     specRanges{block: b.DefRange},
	}
	if !namePattern.MatchString(s.Name) {
		d.rangeErrorf(b.LabelRanges[0], "Invalid run name",
			"The run name %q must be 1 to 56 letters, digits, dashes or underscores, starting and ending with a letter or digit: it names the Nomad job, the results directory and the Consul service.", s.Name)
	}
	c := d.content(b.Body, trainSchema)
	a := c.Attributes
	if attr := a["datacenters"]; d.strList(attr, &s.Datacenters) {
		for _, dc := range s.Datacenters {
			if dc == "" {
				d.errorf(attr, "Invalid value", "datacenters must not contain an empty name.")
			}
		}
	}
	d.nomadName(a["namespace"], &s.Namespace, namespacePattern, "letters, digits and dashes")
	d.nonEmpty(a["region"], &s.Region)
	d.nomadName(a["node_pool"], &s.NodePool, nodePoolPattern, "letters, digits, dashes and underscores")
	d.integer(a["priority"], &s.Priority, 1, 100)
	if attr := a["meta"]; d.strMap(attr, &s.Meta) {
		for _, k := range slices.Sorted(maps.Keys(s.Meta)) {
			if strings.HasPrefix(k, ReservedMetaPrefix) {
				d.keyErrorf(attr, k, "Reserved meta key", "Meta keys starting with %q are set by nomad-train; rename %q.", ReservedMetaPrefix, k)
			}
		}
	}
	if attr := a["env"]; d.strMap(attr, &s.Env) {
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			if !envName(k) {
				d.keyErrorf(attr, k, "Invalid environment variable name",
					"%q cannot be a variable's name: a name is not empty and holds no \"=\", NUL or white space (a worker would get another variable, or none).", k)
				continue
			}
			if workerenv.Reserved(k) {
				d.keyErrorf(attr, k, "Reserved environment variable",
					"nomad-train sets %q for every worker (the worker contract: %s variables other than its tuning settings, and torchrun's); a job that sets it is refused. Rename or remove it.",
					k, workerenv.Prefix)
			}
			if credentialEnv(k) {
				d.keyErrorf(attr, k, "Credentials in the spec", "%s is a credential. %s", k, credentialsHelp)
			}
			if err := workerenv.CheckSetting(k, s.Env[k]); err != nil {
				d.keyErrorf(attr, k, "Invalid runtime setting", "%v: every worker would refuse to start.", err)
			}
		}
	}
	configOK := true
	if attr := a["config"]; attr != nil {
		var js []byte
		if js, configOK = d.config(attr); configOK {
			s.ConfigJSON = js
		}
	}

	if ep := d.single(c, "entrypoint"); ep != nil {
		d.entrypoint(ep, &s.Entrypoint)
	} else {
		d.rangeErrorf(b.DefRange, "Missing entrypoint block",
			"A train block needs an entrypoint block: entrypoint { builtin = %q } or entrypoint { command = \"...\" }.", BuiltinQuickstart)
	}
	if sc := d.single(c, "scaling"); sc != nil {
		d.scaling(sc, &s.Scaling, &s.ranges)
		d.warnGPUOnBuiltin(sc, s)
	}
	s.Volumes = d.volumes(c.Blocks.OfType("volume"), s.Scaling.NumWorkers)
	if r := d.single(c, "run"); r != nil {
		d.run(r, &s.Run, &s.ranges)
	}
	d.storageOnVolumes(s)
	d.resumeFromOnVolumes(s)
	if r := d.single(c, "rendezvous"); r != nil {
		d.rendezvous(r, &s.Rendezvous, &s.ranges)
	}
	builtinOK := slices.Contains(d.builtins, s.Entrypoint.Builtin)
	if t := d.single(c, "tune"); t != nil {
		s.Tune, s.ranges.tune = d.tune(t), t.DefRange
		tuneCheckpointDefault(c, &s.Run)
		if attr := a["config"]; attr != nil && configOK {
			d.gridSearchTaken(attr, s.Tune.SearchAlg.Type, s.ConfigJSON)
		}
		if attr := a["config"]; attr != nil && configOK && builtinOK {
			// Every trial's config has the space's keys: check them, with
			// a sample in place of each search-space function.
			// Its keys only: a sample's values are not every trial's, so
			// no gang check (Scaling{} asks none).
			d.builtinConfig(attr, s.Entrypoint.Builtin, sampleConfig(s.ConfigJSON), Scaling{}, " in every trial")
		}
	} else if attr := a["config"]; attr != nil {
		if d.noSearchSpace(attr, s.ConfigJSON) && configOK && builtinOK {
			d.builtinConfig(attr, s.Entrypoint.Builtin, s.ConfigJSON, s.Scaling, "")
		}
	}
	return s
}

// envName reports whether name can name an environment variable: what
// workerenv.ValidName takes, without white space, which no shell or
// program reads as part of a name.
func envName(name string) bool {
	return workerenv.ValidName(name) && !strings.ContainsFunc(name, unicode.IsSpace)
}

// builtinConfig checks config (JSON) against the builtin that will decode
// it, when the caller can (ParseOptions.CheckConfig): every worker would
// otherwise fail on it at start, and again on each restart. The caller
// checks that config and builtin are themselves valid; where says where
// the workers would fail (" in every trial"), or is "".
func (d *decoder) builtinConfig(attr *hcl.Attribute, builtin string, config []byte, sc Scaling, where string) {
	if d.checkConfig == nil || builtin == "" || len(config) == 0 {
		return
	}
	minWorkers := sc.NumWorkers
	if sc.MinWorkers > 0 {
		minWorkers = sc.MinWorkers
	}
	err := d.checkConfig(builtin, config, minWorkers, sc.NumWorkers)
	if err == nil {
		return
	}
	// Point at the setting the builtin does not know, or cannot use with
	// this gang, when it is one of the config's own keys.
	_, key, _ := strings.Cut(err.Error(), `unknown field "`)
	key, _, _ = strings.Cut(key, `"`)
	var keyed interface{ ConfigKey() string }
	if errors.As(err, &keyed) {
		key = keyed.ConfigKey()
	}
	d.keyErrorf(attr, key, "Config the builtin cannot use",
		"The %s builtin's workers would fail on this config%s: %v.", builtin, where, err)
}

// config converts the train loop config to JSON.
func (d *decoder) config(attr *hcl.Attribute) ([]byte, bool) {
	val, diags := attr.Expr.Value(d.ctx)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || val.IsNull() || !val.IsWhollyKnown() {
		return nil, false
	}
	if ty := val.Type(); !ty.IsObjectType() && !ty.IsMapType() {
		d.errorf(attr, "Incorrect attribute value type", "config must be an object, such as { lr = 0.01, epochs = 10 }; got %s.", ty.FriendlyName())
		return nil, false
	}
	js, err := ctyjson.Marshal(val, val.Type())
	if err != nil {
		d.errorf(attr, "Invalid config", "config cannot be written as JSON: %s.", err)
		return nil, false
	}
	return js, true
}

var (
	entrypointSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "builtin"}, {Name: "command"}, {Name: "args"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "artifact"}},
	}
	artifactSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "source", Required: true}, {Name: "destination"}, {Name: "mode"}, {Name: "options"},
		},
	}
)

func (d *decoder) entrypoint(b *hcl.Block, ep *Entrypoint) {
	c := d.content(b.Body, entrypointSchema)
	a := c.Attributes
	builtin, command := a["builtin"], a["command"]
	switch {
	case builtin != nil && command != nil:
		d.rangeErrorf(command.NameRange, "Conflicting entrypoint", "Set either builtin or command, not both.")
	case builtin == nil && command == nil:
		d.rangeErrorf(b.DefRange, "Missing entrypoint",
			"The entrypoint block needs builtin (one of %s) or command.", quoteList(d.builtins))
	case builtin != nil:
		if d.str(builtin, &ep.Builtin) && !slices.Contains(d.builtins, ep.Builtin) {
			d.errorf(builtin, "Unknown builtin", "There is no builtin %q; known builtins are %s.%s",
				ep.Builtin, quoteList(d.builtins), suggest(ep.Builtin, d.builtins))
		}
		if attr := a["args"]; attr != nil {
			d.rangeErrorf(attr.NameRange, "Arguments for a builtin", "args are passed to a command; a builtin takes its settings from config.")
		}
	default:
		d.nonEmpty(command, &ep.Command)
		d.strList(a["args"], &ep.Args)
	}
	if art := d.single(c, "artifact"); art != nil {
		if builtin != nil {
			d.rangeErrorf(art.DefRange, "Artifact for a builtin", "An artifact fetches a command's files; a builtin ships inside the task driver.")
		}
		ep.Artifact = d.artifact(art)
	}
}

func (d *decoder) artifact(b *hcl.Block) *Artifact {
	c := d.content(b.Body, artifactSchema)
	a := &Artifact{}
	d.nonEmpty(c.Attributes["source"], &a.Source)
	d.nonEmpty(c.Attributes["destination"], &a.Destination)
	d.enum(c.Attributes["mode"], &a.Mode, "any", "file", "dir")
	d.strMap(c.Attributes["options"], &a.Options)
	return a
}

var (
	runSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "storage_path"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "checkpoint"}, {Type: "failure"}, {Type: "storage"}},
	}
	checkpointSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "num_to_keep"}, {Name: "score_attribute"}, {Name: "score_order"}, {Name: "async_upload"}, {Name: "staging"}, {Name: "resume_from"}},
	}
	failureSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "max_failures"}},
	}
)

// storagePath decodes a storage path attribute (storage_path, or the
// storage block's path) into r, noting where it is set.
func (d *decoder) storagePath(attr *hcl.Attribute, r *Run, ranges *specRanges) {
	if attr == nil {
		return
	}
	var p string
	if !d.nonEmpty(attr, &p) {
		return
	}
	local, err := localStoragePath(p)
	if err != nil {
		d.errorf(attr, "Unsupported storage path", "%s.", err)
		return
	}
	r.StoragePath = local
	ranges.storage = attr.Range
}

func (d *decoder) run(b *hcl.Block, r *Run, ranges *specRanges) {
	c := d.content(b.Body, runSchema)
	d.storagePath(c.Attributes["storage_path"], r, ranges)
	if sb := d.single(c, "storage"); sb != nil {
		if attr := c.Attributes["storage_path"]; attr != nil {
			d.rangeErrorf(attr.NameRange, "Conflicting storage settings",
				"storage_path and the storage block (at %s) both say where the run is kept; move the path into the storage block as path = ... and remove storage_path.", sb.DefRange)
		}
		d.storage(sb, r, ranges)
	}
	if cb := d.single(c, "checkpoint"); cb != nil {
		cc := d.content(cb.Body, checkpointSchema)
		d.integer(cc.Attributes["num_to_keep"], &r.Checkpoint.NumToKeep, 0, math.MaxInt32)
		d.nonEmpty(cc.Attributes["score_attribute"], &r.Checkpoint.ScoreAttribute)
		d.enum(cc.Attributes["score_order"], &r.Checkpoint.ScoreOrder, ScoreMax, ScoreMin)
		if attr := cc.Attributes["async_upload"]; attr != nil {
			var on bool
			if d.boolean(attr, &on) {
				r.Checkpoint.AsyncUpload = &on
			}
		}
		if attr := cc.Attributes["staging"]; attr != nil && d.enum(attr, &r.Checkpoint.Staging, workerenv.StagingDisk, workerenv.StagingMemory) &&
			r.Checkpoint.Staging == workerenv.StagingMemory && !strings.HasPrefix(r.StoragePath, "s3://") {
			d.rangeErrorf(attr.Range, "Staging in memory needs an object store",
				`staging = "memory" builds checkpoints in RAM for their upload to an object store; storage_path %q is a directory, where a commit is a rename. Remove staging, or keep the run on s3://.`, r.StoragePath)
		}
		d.resumeFrom(cc.Attributes["resume_from"], r, ranges)
	}
	if fb := d.single(c, "failure"); fb != nil {
		fc := d.content(fb.Body, failureSchema)
		d.integer(fc.Attributes["max_failures"], &r.Failure.MaxFailures, -1, math.MaxInt32)
	}
}

// localStoragePath accepts a local path or a file:// URL and returns the
// path, or an s3://bucket/prefix URL as it is (its credentials come from
// the AWS chain, never from the spec). Other schemes (gs://, ...) are not
// supported yet.
func localStoragePath(p string) (string, error) {
	i := strings.Index(p, "://")
	if i < 0 {
		return p, nil
	}
	scheme := p[:i]
	if scheme == "s3" {
		// As the workers will read it: a bucket S3 allows, no empty or
		// .. segment, and no credentials, query or fragment in the URL.
		if _, err := workerenv.ParseS3URL(p); err != nil {
			return "", err
		}
		return p, nil
	}
	if !strings.EqualFold(scheme, "file") {
		return "", fmt.Errorf("storage scheme %q is not supported; use a local or mounted shared directory, an s3://bucket/prefix URL, or a file:// URL", scheme)
	}
	u, err := url.Parse(p)
	if err != nil {
		return "", fmt.Errorf("%q is not a valid file URL: %w", p, err)
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("file URL %q names host %q; only local files are supported", p, u.Host)
	}
	if u.Path == "" || u.Path == "/" {
		return "", fmt.Errorf("file URL %q has no directory", p)
	}
	return u.Path, nil
}

// resumeFrom decodes checkpoint { resume_from }: a checkpoint directory
// (a file:// URL is turned into its path) or the s3:// location of a
// checkpoint, s3://bucket[/prefix]/<run>/checkpoints/checkpoint_NNNNNN as
// run, tune and status print it, which only a run on S3 may read: the
// storage block's options and credentials are the ones its workers have.
func (d *decoder) resumeFrom(attr *hcl.Attribute, r *Run, ranges *specRanges) {
	var from string
	if attr == nil || !d.nonEmpty(attr, &from) {
		return
	}
	ranges.resumeFrom = attr.Range
	if !strings.HasPrefix(strings.ToLower(from), "s3://") {
		local, err := localStoragePath(from)
		if err != nil {
			d.errorf(attr, "Unsupported checkpoint location", "resume_from: %s.", strings.Replace(err.Error(), "storage scheme", "scheme", 1))
			return
		}
		r.Checkpoint.ResumeFrom = local
		return
	}
	if problem := checkpointLocationProblem(from); problem != "" {
		d.errorf(attr, "Not a checkpoint's location", "resume_from %q %s: want s3://bucket[/prefix]/<run>/checkpoints/checkpoint_NNNNNN, as run, tune and status print a checkpoint.", from, problem)
		return
	}
	if !r.IsS3() {
		d.errorf(attr, "A checkpoint on S3 needs the run on S3", "resume_from is on S3 but storage_path %q is a directory, and the workers get S3 options and credentials only with a run on S3. Copy the checkpoint out first (nomad-train download %s <dir>) and resume from the directory, or keep the run on s3://.", r.StoragePath, from)
		return
	}
	r.Checkpoint.ResumeFrom = from
}

// checkpointLocationProblem says what is wrong with an s3:// checkpoint
// location, or "".
func checkpointLocationProblem(loc string) string {
	if _, err := workerenv.ParseS3URL(loc); err != nil {
		return fmt.Sprintf("is no valid S3 location (%s)", strings.TrimPrefix(err.Error(), fmt.Sprintf("storage url %q: ", loc)))
	}
	bucket, key, _ := strings.Cut(loc[len("s3://"):], "/")
	parts := strings.Split(strings.TrimSuffix(key, "/"), "/")
	n := len(parts)
	switch {
	case bucket == "":
		return "names no bucket"
	case n < 3 || parts[n-3] == "" || parts[n-2] != "checkpoints":
		return "is not under a run's checkpoints/"
	case !isCheckpointName(parts[n-1]):
		return fmt.Sprintf("ends in %q, which is not a checkpoint's name", parts[n-1])
	}
	return ""
}

// isCheckpointName reports whether name is a checkpoint's,
// checkpoint_ and at least six digits.
func isCheckpointName(name string) bool {
	digits, ok := strings.CutPrefix(name, "checkpoint_")
	if !ok || len(digits) < 6 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

var rendezvousSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "backend"}, {Name: "address"}, {Name: "timeout"}, {Name: "rejoin_timeout"}, {Name: "consul_outage_grace"}, {Name: "settle"}},
}

func (d *decoder) rendezvous(b *hcl.Block, r *Rendezvous, ranges *specRanges) {
	c := d.content(b.Body, rendezvousSchema)
	if attr := c.Attributes["backend"]; attr != nil {
		if d.enum(attr, &r.Backend, BackendEmbedded, BackendConsul) {
			ranges.backend = attr.Range
		}
	}
	d.nonEmpty(c.Attributes["address"], &r.Address)
	if attr := c.Attributes["timeout"]; attr != nil {
		var s string
		if d.str(attr, &s) {
			t, err := time.ParseDuration(s)
			switch {
			case err != nil:
				d.errorf(attr, "Invalid duration", "timeout must be a duration such as \"30s\" or \"5m\"; %q is not one.", s)
			case t <= 0:
				d.errorf(attr, "Invalid duration", "timeout must be positive; got %q.", s)
			default:
				r.Timeout = t
			}
		}
	}
	d.positiveDuration(c.Attributes["rejoin_timeout"], &r.RejoinTimeout)
	d.positiveDuration(c.Attributes["consul_outage_grace"], &r.ConsulOutageGrace)
	d.positiveDuration(c.Attributes["settle"], &r.Settle)
}

// positiveDuration decodes attr, when set, as a positive duration into dst.
func (d *decoder) positiveDuration(attr *hcl.Attribute, dst *time.Duration) {
	var s string
	if attr == nil || !d.str(attr, &s) {
		return
	}
	t, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.errorf(attr, "Invalid duration", "%s must be a duration such as \"30s\" or \"5m\"; %q is not one.", attr.Name, s)
	case t <= 0:
		d.errorf(attr, "Invalid duration", "%s must be positive; got %q.", attr.Name, s)
	default:
		*dst = t
	}
}
