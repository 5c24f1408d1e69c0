package annot

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
)

// Jobspec is the part of a Nomad HCL2 jobspec that hetgpu cares about: meta, constraints,
// groups, tasks and device requests. Runtime interpolations such as "${node.unique.id}" are
// kept verbatim, as Nomad's own parser does; input variables resolve to their defaults.
type Jobspec struct {
	File        string
	ID          string
	Namespace   string
	Type        string
	Meta        map[string]Value
	Constraints []SpecConstraint
	Groups      []SpecGroup
	// MetaDups are meta keys written twice in one meta (the last value wins in Nomad).
	MetaDups []MetaDup
	// Parameterized is the job's parameterized block (nil without one): its children are
	// what hetgpu schedules, and Nomad refuses to register one that carries a payload.
	Parameterized *SpecParameterized
}

// SpecParameterized is a parameterized block; Payload is its payload setting as written
// (Nomad's default, "optional", when absent).
type SpecParameterized struct {
	Payload Value
	Range   hcl.Range
}

// MetaDup is a meta key given a second time in the same job or group meta.
type MetaDup struct {
	Group string
	Key   string
	Range hcl.Range
	First hcl.Range
}

// Value is a string value as written in the jobspec.
type Value struct {
	Text string
	// Exact is false when the value depends on something validate cannot evaluate (a
	// function it does not provide, such as file, or a variable without a default); Text is then
	// the expression's source.
	Exact bool
	Range hcl.Range
}

// SpecConstraint is a constraint (or affinity) block.
type SpecConstraint struct {
	LTarget, Operand, RTarget string
	Weight                    int
	Range                     hcl.Range
}

// SpecGroup is a task group.
type SpecGroup struct {
	Name        string
	Count       int
	Meta        map[string]Value
	Constraints []SpecConstraint
	Tasks       []SpecTask
	Range       hcl.Range
}

// SpecTask is a task with its device requests.
type SpecTask struct {
	Name        string
	Driver      string
	Constraints []SpecConstraint
	Devices     []SpecDevice
	Range       hcl.Range
}

// SpecDevice is a `device "name" {}` request in a task's resources.
type SpecDevice struct {
	Name        string
	Count       int
	Constraints []SpecConstraint
	Affinities  []SpecConstraint
	Range       hcl.Range
}

// SlotType is the device type of a GPU slot (a share of a GPU under MPS, from the hetgpu
// device plugin's sharing block).
const SlotType = "gpu-slot"

// IsGPU reports whether a device request name ("gpu", "nvidia/gpu", "nvidia/gpu/Tesla T4",
// "nvidia/gpu-slot") asks for GPUs or GPU slots.
func IsGPU(name string) bool {
	parts := strings.SplitN(name, "/", 3)
	t := parts[0]
	if len(parts) > 1 {
		t = parts[1]
	}
	return t == "gpu" || t == SlotType
}

// ReadJobspec reads and parses a jobspec file.
func ReadJobspec(path string) (*Jobspec, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read jobspec: %w", err)
	}
	// file("x") reads x in the working directory, not beside the jobspec: nomad job run
	// parses with the file's base name as its path, so its functions resolve from ".".
	return parseJobspec(path, src, ".")
}

// ParseJobspec parses an HCL2 jobspec (native syntax; Nomad's JSON job format is not read).
// Input variables resolve to their defaults, locals to their values, Nomad's pure functions
// (format, join, merge, ...) evaluate, and dynamic blocks expand
// as Nomad expands them, so validate sees the groups, tasks and devices Nomad would register.
func ParseJobspec(filename string, src []byte) (*Jobspec, error) {
	return parseJobspec(filename, src, "")
}

// parseJobspec is ParseJobspec with the file functions rooted at baseDir ("": without them).
func parseJobspec(filename string, src []byte, baseDir string) (*Jobspec, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("parse %s: %w", filename, diags)
	}
	body := f.Body.(*hclsyntax.Body)
	r := &reader{src: src, vars: map[string]cty.Value{}, locals: map[string]cty.Value{}, iters: map[string]cty.Value{},
		funcs: functions(baseDir)}
	// Input variables first: their defaults feed var.x references.
	for _, b := range body.Blocks {
		if b.Type == "variable" && len(b.Labels) == 1 {
			if a, ok := b.Body.Attributes["default"]; ok {
				if v, d := a.Expr.Value(nil); !d.HasErrors() {
					r.vars[b.Labels[0]] = v
				}
			}
		}
	}
	r.readLocals(body)
	var jobs []*hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type == "job" {
			jobs = append(jobs, b)
		}
	}
	if len(jobs) != 1 {
		return nil, fmt.Errorf("parse %s: expected exactly one job block, found %d", filename, len(jobs))
	}
	jb := jobs[0]
	if len(jb.Labels) != 1 {
		return nil, fmt.Errorf("%s: job block needs one label, the job ID", jb.DefRange())
	}
	js := &Jobspec{File: filename, ID: jb.Labels[0], Meta: map[string]Value{}}
	js.Namespace = r.str(jb.Body, "namespace").Text
	js.Type = r.str(jb.Body, "type").Text
	js.Meta = r.meta(jb.Body, "")
	js.Constraints = r.constraints(jb.Body, "constraint")
	r.each(jb.Body, "parameterized", func(_ []string, pb *hclsyntax.Body, rng hcl.Range) {
		js.Parameterized = &SpecParameterized{Payload: r.str(pb, "payload"), Range: rng}
	})
	r.each(jb.Body, "group", func(labels []string, gb *hclsyntax.Body, rng hcl.Range) {
		if len(labels) != 1 {
			return
		}
		g := SpecGroup{Name: labels[0], Range: rng}
		g.Count = r.count(gb, "group", g.Name)
		g.Meta = r.meta(gb, g.Name)
		g.Constraints = r.constraints(gb, "constraint")
		r.each(gb, "task", func(labels []string, tb *hclsyntax.Body, rng hcl.Range) {
			if len(labels) != 1 {
				return
			}
			t := SpecTask{Name: labels[0], Driver: r.str(tb, "driver").Text, Range: rng}
			t.Constraints = r.constraints(tb, "constraint")
			r.each(tb, "resources", func(_ []string, rb *hclsyntax.Body, _ hcl.Range) {
				r.each(rb, "device", func(labels []string, db *hclsyntax.Body, rng hcl.Range) {
					if len(labels) != 1 {
						return
					}
					d := SpecDevice{Name: labels[0], Range: rng}
					d.Count = r.count(db, "device", d.Name)
					d.Constraints = r.constraints(db, "constraint")
					d.Affinities = r.constraints(db, "affinity")
					t.Devices = append(t.Devices, d)
				})
			})
			g.Tasks = append(g.Tasks, t)
		})
		js.Groups = append(js.Groups, g)
	})
	if r.err != nil {
		return nil, r.err
	}
	js.MetaDups = r.dups
	return js, nil
}

// readLocals evaluates the locals blocks. A local may name another written further down, so
// evaluation repeats until a pass adds nothing; a local validate cannot evaluate (it needs a
// variable without a default, or a function) stays out and what reads it is not exact.
func (r *reader) readLocals(body *hclsyntax.Body) {
	pending := map[string]hclsyntax.Expression{}
	for _, b := range body.Blocks {
		if b.Type != "locals" {
			continue
		}
		for name, a := range b.Body.Attributes {
			pending[name] = a.Expr
		}
	}
	for progress := true; progress && len(pending) > 0; {
		progress = false
		for name, expr := range pending {
			v, d := expr.Value(r.ctx())
			if d.HasErrors() || !v.IsWhollyKnown() {
				continue
			}
			r.locals[name] = v
			delete(pending, name)
			progress = true
		}
	}
}

// each calls fn for every block of type typ in body: those written out, then one per element of
// each `dynamic "typ"` block, whose content is read with its iterator (typ, or the block's
// iterator attribute) in scope, as Nomad's parser expands it.
func (r *reader) each(body *hclsyntax.Body, typ string, fn func(labels []string, body *hclsyntax.Body, rng hcl.Range)) {
	for _, b := range body.Blocks {
		switch {
		case b.Type == typ:
			fn(b.Labels, b.Body, b.DefRange())
		case b.Type == "dynamic" && len(b.Labels) == 1 && b.Labels[0] == typ:
			r.dynamic(b, fn)
		}
	}
}

func (r *reader) dynamic(b *hclsyntax.Block, fn func(labels []string, body *hclsyntax.Body, rng hcl.Range)) {
	typ := b.Labels[0]
	where := fmt.Sprintf("%s: dynamic %q", b.DefRange(), typ)
	var content *hclsyntax.Block
	for _, cb := range b.Body.Blocks {
		if cb.Type == "content" {
			content = cb
		}
	}
	if content == nil {
		r.fail(fmt.Errorf("%s: expected a content block", where))
		return
	}
	iter := typ
	if a, ok := b.Body.Attributes["iterator"]; ok {
		if iter = hcl.ExprAsKeyword(a.Expr); iter == "" {
			r.fail(fmt.Errorf("%s: iterator = %s: expected a bare name", where, a.Expr.Range().SliceBytes(r.src)))
			return
		}
	}
	fe, ok := b.Body.Attributes["for_each"]
	if !ok {
		r.fail(fmt.Errorf("%s: expected a for_each attribute", where))
		return
	}
	coll, d := fe.Expr.Value(r.ctx())
	if d.HasErrors() || !coll.IsWhollyKnown() || coll.IsNull() || !coll.CanIterateElements() {
		r.fail(fmt.Errorf("%s: for_each = %s: expected a list, set or map that validate can evaluate from variables' defaults and locals (it cannot see the blocks this makes otherwise)",
			where, fe.Expr.Range().SliceBytes(r.src)))
		return
	}
	outer, had := r.iters[iter]
	defer func() {
		if had {
			r.iters[iter] = outer
		} else {
			delete(r.iters, iter)
		}
	}()
	for it := coll.ElementIterator(); it.Next(); {
		k, v := it.Element()
		r.iters[iter] = cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})
		var labels []string
		if la, ok := b.Body.Attributes["labels"]; ok {
			lv, d := la.Expr.Value(r.ctx())
			if d.HasErrors() || !lv.IsWhollyKnown() || lv.IsNull() || !lv.CanIterateElements() {
				r.fail(fmt.Errorf("%s: labels = %s: expected a list of strings", where, la.Expr.Range().SliceBytes(r.src)))
				return
			}
			for li := lv.ElementIterator(); li.Next(); {
				_, l := li.Element()
				s, ok := ctyString(l)
				if !ok {
					r.fail(fmt.Errorf("%s: labels = %s: expected a list of strings", where, la.Expr.Range().SliceBytes(r.src)))
					return
				}
				labels = append(labels, s)
			}
		}
		fn(labels, content.Body, content.DefRange())
	}
}

// count reads the count of a group or device block (1 when absent); what and name say which
// block in the error.
func (r *reader) count(body *hclsyntax.Body, what, name string) int {
	c := r.str(body, "count")
	if c.Text == "" {
		return 1
	}
	n, err := strconv.Atoi(c.Text)
	if err != nil || n < 0 {
		r.fail(fmt.Errorf("%s: %s %q count = %q: expected a non-negative integer", c.Range, what, name, c.Text))
		return 0
	}
	return n
}

type reader struct {
	src    []byte
	vars   map[string]cty.Value
	locals map[string]cty.Value
	// iters are the iterators of the dynamic blocks being expanded (group.key, group.value).
	iters map[string]cty.Value
	funcs map[string]function.Function
	err   error
	dups  []MetaDup
}

func (r *reader) ctx() *hcl.EvalContext {
	vars := map[string]cty.Value{"var": cty.ObjectVal(r.vars), "local": cty.ObjectVal(r.locals)}
	for name, v := range r.iters {
		vars[name] = v
	}
	return &hcl.EvalContext{Variables: vars, Functions: r.funcs}
}

// runtimeRoots are Nomad's runtime interpolation roots, kept verbatim in the job.
var runtimeRoots = map[string]bool{"node": true, "attr": true, "meta": true, "device": true, "unique": true, "env": true}

// value evaluates an expression to a string the way Nomad's parser would store it.
func (r *reader) value(expr hclsyntax.Expression) Value {
	rng := expr.Range()
	v, diags := expr.Value(r.ctx())
	for _, d := range diags {
		// A function that fails on what it was given (a file that is not there, YAML that
		// does not parse) fails Nomad's parse too; a variable validate cannot see does not.
		if call, ok := hcl.DiagnosticExtra[hclsyntax.FunctionCallDiagExtra](d); ok && call.FunctionCallError() != nil {
			r.fail(fmt.Errorf("%s: %s: %s; Nomad refuses the jobspec too", rng, rng.SliceBytes(r.src), strings.TrimSuffix(d.Detail, ".")))
		}
	}
	if !diags.HasErrors() && v.IsWhollyKnown() && !v.IsNull() {
		if s, ok := ctyString(v); ok {
			return Value{Text: s, Exact: true, Range: rng}
		}
	}
	// Nomad keeps runtime interpolations (${node.unique.id}, ${NOMAD_ALLOC_ID}) as text.
	exact := true
	for _, t := range expr.Variables() {
		root := t.RootName()
		if !runtimeRoots[root] && !strings.HasPrefix(root, "NOMAD_") {
			exact = false
		}
	}
	text := string(rng.SliceBytes(r.src))
	switch expr.(type) {
	case *hclsyntax.TemplateExpr, *hclsyntax.TemplateWrapExpr:
		if u, err := strconv.Unquote(text); err == nil {
			text = u
		} else {
			text = strings.TrimSuffix(strings.TrimPrefix(text, `"`), `"`)
		}
	default:
		exact = false
	}
	return Value{Text: text, Exact: exact, Range: rng}
}

func ctyString(v cty.Value) (string, bool) {
	switch v.Type() {
	case cty.String:
		return v.AsString(), true
	case cty.Bool:
		return strconv.FormatBool(v.True()), true
	case cty.Number:
		f := v.AsBigFloat()
		if f.IsInt() {
			i, _ := f.Int(nil)
			return i.String(), true
		}
		return f.Text('g', -1), true
	}
	if s, err := convert.Convert(v, cty.String); err == nil && !s.IsNull() {
		return s.AsString(), true
	}
	return "", false
}

func (r *reader) str(body *hclsyntax.Body, name string) Value {
	a, ok := body.Attributes[name]
	if !ok {
		return Value{}
	}
	return r.value(a.Expr)
}

// meta reads `meta { k = "v" }` blocks and `meta = { "k.with.dots" = "v" }` attributes.
func (r *reader) meta(body *hclsyntax.Body, group string) map[string]Value {
	out := map[string]Value{}
	put := func(k string, v Value) {
		if prev, ok := out[k]; ok {
			r.dups = append(r.dups, MetaDup{Group: group, Key: k, Range: v.Range, First: prev.Range})
		}
		out[k] = v
	}
	r.each(body, "meta", func(_ []string, mb *hclsyntax.Body, _ hcl.Range) {
		for name, a := range mb.Attributes {
			put(name, r.value(a.Expr))
		}
	})
	if a, ok := body.Attributes["meta"]; ok {
		obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr)
		if !ok {
			r.fail(fmt.Errorf("%s: meta must be a block or a map literal", a.SrcRange))
			return out
		}
		for _, item := range obj.Items {
			kv, d := item.KeyExpr.Value(r.ctx())
			k, ok := ctyString(kv)
			if d.HasErrors() || !ok {
				r.fail(fmt.Errorf("%s: meta key must be a string", item.KeyExpr.Range()))
				continue
			}
			put(k, r.value(item.ValueExpr))
		}
	}
	return out
}

// shorthands are the operators a constraint or affinity block may name as an attribute
// (`distinct_hosts = true`, `regexp = "..."`), in the order Nomad's parser applies them.
func shorthands(typ string) []string {
	if typ == "affinity" {
		return []string{"version", "semver", "regexp", "set_contains_any", "set_contains_all", "set_contains"}
	}
	return []string{"version", "semver", "regexp", "set_contains", "distinct_hosts", "distinct_property"}
}

func (r *reader) constraints(body *hclsyntax.Body, typ string) []SpecConstraint {
	var out []SpecConstraint
	r.each(body, typ, func(_ []string, cb *hclsyntax.Body, rng hcl.Range) {
		c := SpecConstraint{
			LTarget: r.str(cb, "attribute").Text,
			Operand: r.str(cb, "operator").Text,
			RTarget: r.str(cb, "value").Text,
			Range:   rng,
		}
		// Nomad's shorthand attributes set the operator (the last one in Nomad's order wins);
		// distinct_property names the attribute instead of the value.
		for _, op := range shorthands(typ) {
			if v := r.str(cb, op).Text; v != "" {
				c.Operand = op
				if op == "distinct_property" {
					c.LTarget = v
				} else {
					c.RTarget = v
				}
			}
		}
		if c.Operand == "" {
			c.Operand = HoldOperand // Nomad's default
		}
		if w := r.str(cb, "weight").Text; w != "" {
			n, err := strconv.Atoi(w)
			if err != nil {
				r.fail(fmt.Errorf("%s: weight = %q: expected an integer from -100 to 100", rng, w))
			}
			c.Weight = n
		}
		out = append(out, c)
	})
	return out
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Finding is one problem validate found.
type Finding struct {
	// Severity is "error" (the sidecar would keep the job held, or Nomad would reject it) or
	// "warning" (it runs, but probably not as intended).
	Severity string
	Pos      hcl.Pos
	File     string
	Group    string
	Message  string
}

func (f Finding) String() string {
	loc := f.File
	if f.Pos.Line > 0 {
		loc = fmt.Sprintf("%s:%d", f.File, f.Pos.Line)
	}
	g := ""
	if f.Group != "" {
		g = fmt.Sprintf("group %q: ", f.Group)
	}
	return fmt.Sprintf("%s: %s: %s%s", loc, f.Severity, g, f.Message)
}

// Check validates the hetgpu annotations and the hold constraint of every group.
func Check(js *Jobspec) []Finding {
	var out []Finding
	add := func(sev string, rng hcl.Range, group, format string, args ...any) {
		out = append(out, Finding{Severity: sev, Pos: rng.Start, File: js.File, Group: group, Message: fmt.Sprintf(format, args...)})
	}
	jobHold := false
	for _, c := range js.Constraints {
		if IsHold(c.LTarget, c.Operand, c.RTarget) {
			jobHold = true
		} else if c.LTarget == HoldAttribute {
			add("warning", c.Range, "", "constraint on %s is not the hold constraint (%s %s %q); write operator \"=\" and value %q", HoldAttribute, HoldAttribute, HoldOperand, HoldValue, HoldValue)
		}
	}
	for _, d := range js.MetaDups {
		if strings.HasPrefix(strings.ToLower(d.Key), Prefix) {
			add("error", d.Range, d.Group, "%s is given twice in one meta (first at line %d): Nomad keeps only the last value; remove one", d.Key, d.First.Start.Line)
		}
	}
	// Nomad's meta keys are case-sensitive and hetgpu reads only lower-case "hetgpu." keys:
	// a case variant would be ignored without a word.
	caseVariants := func(m map[string]Value, group string) {
		for k, v := range m {
			if lk := strings.ToLower(k); strings.HasPrefix(lk, Prefix) && k != lk {
				add("error", v.Range, group, "meta key %q: hetgpu keys are lower case; write %q (this one would be ignored)", k, lk)
			}
		}
	}
	caseVariants(js.Meta, "")
	for _, g := range js.Groups {
		caseVariants(g.Meta, g.Name)
	}
	if p := js.Parameterized; p != nil && jobHold {
		// A pin is a register, and Nomad's servers refuse any register of a job that carries
		// a dispatch payload (seen on a real agent).
		switch strings.TrimSpace(p.Payload.Text) {
		case "forbidden":
		case "required":
			add("error", p.Range, "", "parameterized job with the hold and payload = \"required\": Nomad refuses to register any job that carries a payload, so hetgpu can never pin a child; set payload = \"forbidden\" and pass the inputs with nomad job dispatch -meta, or remove the hold")
		default:
			add("warning", p.Range, "", "parameterized job with the hold: a child dispatched with a payload can never be pinned (Nomad refuses to register any job that carries one); set payload = \"forbidden\" and pass the inputs with nomad job dispatch -meta")
		}
	}
	jobMeta := checkable(js.Meta)
	jobHasGPUs := false
	for _, g := range js.Groups {
		for _, t := range g.Tasks {
			for _, d := range t.Devices {
				if IsGPU(d.Name) && d.Count > 0 {
					jobHasGPUs = true
				}
			}
		}
	}
	for _, g := range js.Groups {
		groupHold := false
		for _, c := range g.Constraints {
			if IsHold(c.LTarget, c.Operand, c.RTarget) {
				groupHold = true
			}
		}
		held := jobHold || groupHold
		for _, t := range g.Tasks {
			for _, c := range t.Constraints {
				if IsHold(c.LTarget, c.Operand, c.RTarget) {
					add("error", c.Range, g.Name, "task %q: the hold constraint belongs in the job or the group, not a task", t.Name)
				}
			}
		}
		// Values validate cannot evaluate are reported, not guessed.
		merged := map[string]Value{}
		for k, v := range js.Meta {
			merged[k] = v
		}
		for k, v := range g.Meta {
			merged[k] = v
		}
		for k, v := range merged {
			if strings.HasPrefix(k, Prefix) && !v.Exact {
				add("warning", v.Range, g.Name, "%s = %s is not a literal; validate cannot check it", k, v.Text)
			}
		}
		a, err := Parse(jobMeta, checkable(g.Meta), g.Name)
		for _, e := range Errors(err) {
			rng := merged[e.Key].Range
			add("error", rng, g.Name, "%s", e.Error())
		}
		if v, ok := merged[KeyEnable]; ok {
			if b, err := parseBool(strings.TrimSpace(v.Text)); err == nil && !b && held {
				// The sidecar decides for every held group (the hold alone hands it over), so
				// this is no dead end, only a contradiction worth pointing out.
				add("warning", v.Range, g.Name, "%s is false but the group carries the hold constraint: the hold wins and hetgpu decides for it; remove the hold to leave the group to Nomad", KeyEnable)
			}
		}
		gpus, perAlloc := 0, 0
		for _, t := range g.Tasks {
			for _, d := range t.Devices {
				if !IsGPU(d.Name) {
					continue
				}
				perAlloc += d.Count
				for _, c := range d.Constraints {
					if c.LTarget == "${device.ids}" && held {
						add("warning", c.Range, g.Name, "task %q: a ${device.ids} constraint in a held group is replaced by hetgpu's pin", t.Name)
					}
				}
			}
		}
		gpus = perAlloc * g.Count
		switch {
		case held && gpus == 0 && jobHold && !groupHold && jobHasGPUs:
			// A launcher beside GPU groups under the job-level hold: the pin of the GPU groups
			// releases it in the same job update (README, Gangs).
		case held && gpus == 0:
			add("error", g.Range, g.Name, "the group is held for hetgpu but requests no GPU (a device \"nvidia/gpu\" block with count >= 1): hetgpu only places GPU groups, so it would wait forever")
		case !held && a.Enabled:
			add("warning", g.Range, g.Name, "%s is true but the group has no hold constraint (%s %s %q): Nomad places it at once and hetgpu only compares its own decision (shadow)", KeyEnable, HoldAttribute, HoldOperand, HoldValue)
		}
		// A hold without hetgpu.enable is fine: the hold alone hands the group to hetgpu (README,
		// Hold constraint), so it is not worth a finding.
		if a.MaxNodes > 1 && g.Count <= 1 {
			add("warning", merged[KeyMaxNodes].Range, g.Name, "%s = %d has no effect on a group with count = %d: one allocation runs on one node; use count > 1 for data-parallel jobs", KeyMaxNodes, a.MaxNodes, g.Count)
		}
		if g.Count > 1 && a.MaxNodes > 0 && a.MaxNodes < g.Count && perAlloc > 0 {
			add("warning", merged[KeyMaxNodes].Range, g.Name, "%s = %d is below count = %d: hetgpu places one allocation per node, so the group needs %d nodes", KeyMaxNodes, a.MaxNodes, g.Count, g.Count)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pos.Line < out[j].Pos.Line })
	return out
}

// checkable is the meta validate can check: the values it evaluated. The others are warned
// about as not literal; their Text is the expression's source, not what Nomad would store.
func checkable(m map[string]Value) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if v.Exact {
			out[k] = v.Text
		}
	}
	return out
}
