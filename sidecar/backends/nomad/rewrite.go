package nomad

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/annot"
)

// The job rewrites below are pure functions on a job fresh from Jobs().Info; the caller
// re-registers the result with EnforceRegister. They never touch meta (a meta change restarts
// allocations) and change only what the sidecar owns on a managed group:
//   - the hold constraint (job or group level),
//   - group constraints on ${node.unique.id} (the node pin),
//   - ${device.ids} constraints of GPU device requests (the instance pin),
//   - the job's ui block: a hetgpu section at the top of the description and one link.

const (
	// NodeTarget pins a group to nodes; escaping the computed class disables Nomad's
	// feasibility caching for the group (see the integration notes, 6.4).
	NodeTarget = "${node.unique.id}"
	// DeviceIDsTarget pins a device request to instance IDs.
	DeviceIDsTarget = "${device.ids}"
	// uiMarker separates the sidecar's part of the ui description from the user's.
	uiMarker = "<!-- hetgpu -->"
	// LinkLabel labels the explain link in the job's ui block.
	LinkLabel = "hetgpu: why here"
	uiHeader  = "**hetgpu**"
)

// GroupPin is what a decision writes into one task group.
type GroupPin struct {
	Group     string
	NodeIDs   []string
	DeviceIDs []string
	// Line is the group's line in the ui description (markdown, one line).
	Line string
}

// UI carries the ui block parts the rewrites set.
type UI struct {
	// ExplainURL links the job's explain page; empty leaves links alone.
	ExplainURL string
}

func findGroup(job *api.Job, name string) *api.TaskGroup {
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == name {
			return tg
		}
	}
	return nil
}

func isHoldC(c *api.Constraint) bool {
	return c != nil && annot.IsHold(c.LTarget, c.Operand, c.RTarget)
}

func hasHold(cs []*api.Constraint) bool {
	for _, c := range cs {
		if isHoldC(c) {
			return true
		}
	}
	return false
}

func withoutHold(cs []*api.Constraint) []*api.Constraint {
	var out []*api.Constraint
	for _, c := range cs {
		if !isHoldC(c) {
			out = append(out, c)
		}
	}
	return out
}

func holdConstraint() *api.Constraint {
	h := annot.Hold()
	return api.NewConstraint(h.LTarget, h.Operand, h.RTarget)
}

// groupHeld reports whether a group waits for hetgpu: the hold at job or group level.
func groupHeld(job *api.Job, tg *api.TaskGroup) bool {
	return hasHold(job.Constraints) || hasHold(tg.Constraints)
}

// gpuDevices returns the GPU device requests of a group, over all tasks.
func gpuDevices(tg *api.TaskGroup) []*api.RequestedDevice {
	var out []*api.RequestedDevice
	for _, t := range tg.Tasks {
		if t == nil || t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d != nil && annot.IsGPU(d.Name) {
				out = append(out, d)
			}
		}
	}
	return out
}

// PinOf reads a group's pin back from its constraints: the nodes and GPU instances hetgpu
// pinned it to, or ok=false when the group carries no pin.
func PinOf(tg *api.TaskGroup) (nodes, devices []string, ok bool) {
	for _, c := range tg.Constraints {
		if c != nil && c.LTarget == NodeTarget && (c.Operand == "=" || c.Operand == "==" || c.Operand == api.ConstraintSetContainsAny) {
			nodes = append(nodes, splitList(c.RTarget)...)
		}
	}
	for _, d := range gpuDevices(tg) {
		for _, c := range d.Constraints {
			if c != nil && c.LTarget == DeviceIDsTarget && c.Operand == api.ConstraintSetContainsAny {
				devices = append(devices, splitList(c.RTarget)...)
			}
		}
	}
	if len(nodes) == 0 || len(devices) == 0 {
		return nil, nil, false
	}
	return dedupe(nodes), dedupe(devices), true
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// PinJob rewrites a held job so Nomad places the given groups exactly where hetgpu decided:
// the hold goes, a ${node.unique.id} constraint pins the node(s) and a ${device.ids}
// set_contains_any constraint on every GPU request pins the instances. A job-level hold moves
// down to the job's other GPU groups that are still waiting.
func PinJob(job *api.Job, pins []GroupPin, ui UI) error {
	if len(pins) == 0 {
		return fmt.Errorf("pin: no groups")
	}
	pinned := map[string]bool{}
	for _, p := range pins {
		tg := findGroup(job, p.Group)
		if tg == nil {
			return fmt.Errorf("pin group %q: the job has no such group", p.Group)
		}
		if !groupHeld(job, tg) {
			return fmt.Errorf("pin group %q: the group is not held (pinned or released already)", p.Group)
		}
		if len(p.NodeIDs) == 0 || len(p.DeviceIDs) == 0 {
			return fmt.Errorf("pin group %q: a pin needs at least one node and one GPU", p.Group)
		}
		if len(gpuDevices(tg)) == 0 {
			return fmt.Errorf("pin group %q: the group requests no GPU device", p.Group)
		}
		pinned[p.Group] = true
	}
	if hasHold(job.Constraints) {
		job.Constraints = withoutHold(job.Constraints)
		for _, tg := range job.TaskGroups {
			if tg.Name == nil || pinned[*tg.Name] || len(gpuDevices(tg)) == 0 || hasHold(tg.Constraints) {
				continue
			}
			if _, _, ok := PinOf(tg); ok {
				continue
			}
			tg.Constraints = append(tg.Constraints, holdConstraint())
		}
	}
	lines := map[string]string{}
	for _, p := range pins {
		tg := findGroup(job, p.Group)
		tg.Constraints = withoutTarget(withoutHold(tg.Constraints), NodeTarget)
		nodes := dedupe(append([]string(nil), p.NodeIDs...))
		if len(nodes) == 1 {
			tg.Constraints = append(tg.Constraints, api.NewConstraint(NodeTarget, "=", nodes[0]))
		} else {
			tg.Constraints = append(tg.Constraints, api.NewConstraint(NodeTarget, api.ConstraintSetContainsAny, strings.Join(nodes, ",")))
		}
		ids := strings.Join(dedupe(append([]string(nil), p.DeviceIDs...)), ",")
		for _, d := range gpuDevices(tg) {
			d.Constraints = append(withoutTarget(d.Constraints, DeviceIDsTarget), api.NewConstraint(DeviceIDsTarget, api.ConstraintSetContainsAny, ids))
		}
		lines[p.Group] = p.Line
	}
	setUI(job, lines, ui)
	return nil
}

// withoutTarget drops the constraints on ltarget (the pin's NodeTarget, the device's
// DeviceIDsTarget); nil entries stay.
func withoutTarget(cs []*api.Constraint, ltarget string) []*api.Constraint {
	var out []*api.Constraint
	for _, c := range cs {
		if c != nil && c.LTarget == ltarget {
			continue
		}
		out = append(out, c)
	}
	return out
}

// ReholdJob puts a pinned group back on hold so hetgpu decides again: the pin constraints go,
// the hold returns, and the ui line says why.
func ReholdJob(job *api.Job, group, line string, ui UI) error {
	tg := findGroup(job, group)
	if tg == nil {
		return fmt.Errorf("re-hold group %q: the job has no such group", group)
	}
	if groupHeld(job, tg) {
		return fmt.Errorf("re-hold group %q: the group is held already", group)
	}
	tg.Constraints = append(withoutTarget(tg.Constraints, NodeTarget), holdConstraint())
	for _, d := range gpuDevices(tg) {
		d.Constraints = withoutTarget(d.Constraints, DeviceIDsTarget)
	}
	setUI(job, map[string]string{group: line}, ui)
	return nil
}

// ReleaseJob hands a job back to plain Nomad scheduling: every hold constraint (job, groups,
// tasks) goes and the ui description says so; pins already made stay. It reports whether the
// job carried a hold.
func ReleaseJob(job *api.Job, line string) bool {
	changed := false
	lines := map[string]string{}
	if hasHold(job.Constraints) {
		job.Constraints = withoutHold(job.Constraints)
		changed = true
		for _, tg := range job.TaskGroups {
			if tg.Name != nil {
				lines[*tg.Name] = line
			}
		}
	}
	for _, tg := range job.TaskGroups {
		if hasHold(tg.Constraints) {
			tg.Constraints = withoutHold(tg.Constraints)
			changed = true
			if tg.Name != nil {
				lines[*tg.Name] = line
			}
		}
		for _, t := range tg.Tasks {
			if t != nil && hasHold(t.Constraints) {
				t.Constraints = withoutHold(t.Constraints)
				changed = true
			}
		}
	}
	if changed {
		setUI(job, lines, UI{})
	}
	return changed
}

// SetGroupLine replaces one group's line in the ui description (e.g. to show an annotation
// error) without touching constraints.
func SetGroupLine(job *api.Job, group, line string, ui UI) {
	setUI(job, map[string]string{group: line}, ui)
}

// GroupLines returns the hetgpu lines of a job's ui description by group.
func GroupLines(job *api.Job) map[string]string {
	if job.UI == nil {
		return map[string]string{}
	}
	lines, _ := splitDescription(job.UI.Description)
	return lines
}

// splitDescription separates hetgpu's group lines from the user's own description.
func splitDescription(desc string) (lines map[string]string, user string) {
	lines = map[string]string{}
	ours, rest, found := strings.Cut(desc, uiMarker)
	if !found {
		return lines, desc
	}
	for _, l := range strings.Split(ours, "\n") {
		if g, ok := groupOfLine(l); ok {
			lines[g] = l
		}
	}
	return lines, strings.TrimLeft(rest, "\n")
}

func groupOfLine(l string) (string, bool) {
	const p = "- group `"
	if !strings.HasPrefix(l, p) {
		return "", false
	}
	name, _, ok := strings.Cut(l[len(p):], "`")
	return name, ok
}

// GroupLine formats a group's line: "- group `name`: text". Newlines in text are flattened so
// one group is always one line.
func GroupLine(group, text string) string {
	text = strings.Join(strings.Fields(text), " ")
	return "- group `" + strings.ReplaceAll(group, "`", "'") + "`: " + text
}

// MaxDescription is Nomad's limit on a job's ui description ("must be under 1000
// characters"); bytes are counted, which is never fewer than characters.
const MaxDescription = 999

var (
	reIDList = regexp.MustCompile(` \{[^}]*\}`)
	reWhy    = regexp.MustCompile(` · \[why\]\([^)]*\)`)
)

// fitDescription assembles hetgpu's lines and the user's description under Nomad's limit,
// shortening step by step: GPU ID lists, then per-line explain links (the ui link stays),
// then the user's text, then the lines themselves.
func fitDescription(lines, user string) string {
	build := func(lines, user string) string {
		d := uiHeader + "\n" + lines
		if lines != "" {
			d += "\n"
		}
		d += uiMarker
		if user != "" {
			d += "\n\n" + user
		}
		return d
	}
	d := build(lines, user)
	if len(d) <= MaxDescription {
		return d
	}
	lines = reIDList.ReplaceAllString(lines, "")
	if d = build(lines, user); len(d) <= MaxDescription {
		return d
	}
	lines = reWhy.ReplaceAllString(lines, "")
	if d = build(lines, user); len(d) <= MaxDescription {
		return d
	}
	if room := MaxDescription - len(build(lines, "")) - 2; room > 20 {
		if d = build(lines, truncRunes(user, room-3)+"…"); len(d) <= MaxDescription {
			return d
		}
	}
	ls := strings.Split(lines, "\n")
	per := (MaxDescription - len(build("", "")) - len(ls)) / max(1, len(ls))
	for i, l := range ls {
		if len(l) > per {
			ls[i] = truncRunes(l, per-3) + "…"
		}
	}
	return build(strings.Join(ls, "\n"), "")
}

// truncRunes cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func setUI(job *api.Job, update map[string]string, ui UI) {
	if job.UI == nil {
		job.UI = &api.JobUIConfig{}
	}
	lines, user := splitDescription(job.UI.Description)
	for g, l := range update {
		if l == "" {
			continue
		}
		if _, ok := groupOfLine(l); !ok {
			l = GroupLine(g, l)
		}
		lines[g] = l
	}
	job.UI.Description = describe(job, lines, user)
	if ui.ExplainURL != "" {
		var links []*api.JobUILink
		for _, l := range job.UI.Links {
			if l != nil && l.Label != LinkLabel {
				links = append(links, l)
			}
		}
		job.UI.Links = append(links, &api.JobUILink{Label: LinkLabel, URL: ui.ExplainURL})
	}
}

// describe is the ui description of the group lines and the user's own text: the lines in
// the job's group order (lines of groups that no longer exist are dropped), then the user's.
func describe(job *api.Job, lines map[string]string, user string) string {
	var ordered []string
	for _, tg := range job.TaskGroups {
		if tg.Name == nil {
			continue
		}
		if l, ok := lines[*tg.Name]; ok {
			ordered = append(ordered, l)
		}
	}
	return fitDescription(strings.Join(ordered, "\n"), user)
}

// ReholdGang puts several pinned groups of one job back on hold in one rewrite, so one
// register stops all of a gang (the groups are never seen half held). With jobLevel the hold
// goes on the job, as at submission: the job's groups without GPUs (a launcher) wait too and
// the next pin of the GPU groups releases them in the same register; the caller sets it only
// when the groups are all of the job's live GPU groups. Otherwise each group gets its own hold.
// lines are the ui lines per group (groups without one keep theirs).
func ReholdGang(job *api.Job, groups []string, jobLevel bool, lines map[string]string, ui UI) error {
	if len(groups) == 0 {
		return fmt.Errorf("re-hold: no groups")
	}
	for _, g := range groups {
		tg := findGroup(job, g)
		if tg == nil {
			return fmt.Errorf("re-hold group %q: the job has no such group", g)
		}
		if groupHeld(job, tg) {
			return fmt.Errorf("re-hold group %q: the group is held already", g)
		}
	}
	for _, g := range groups {
		tg := findGroup(job, g)
		tg.Constraints = withoutTarget(tg.Constraints, NodeTarget)
		if !jobLevel {
			tg.Constraints = append(tg.Constraints, holdConstraint())
		}
		for _, d := range gpuDevices(tg) {
			d.Constraints = withoutTarget(d.Constraints, DeviceIDsTarget)
		}
	}
	if jobLevel {
		job.Constraints = append(job.Constraints, holdConstraint())
	}
	setUI(job, lines, ui)
	return nil
}
