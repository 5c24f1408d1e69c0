// Package constraint implements Nomad's constraint semantics for hetgpu's placement: the
// operators, node targets (${node.*}, ${attr.*}, ${meta.*}) and device targets (${device.*}),
// literal parsing with units and the comparison rules, so that a placement the sidecar pins is
// one Nomad's scheduler will accept. The rules follow Nomad's scheduler/feasible (facts in
// docs/nomad-integration.md §4.4 and §6); where Nomad silently evaluates a malformed constraint
// to false (unknown operator or target, bad regexp or version constraint) this package returns
// an error instead, so the job is reported rather than quietly never placed.
package constraint

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Operators, as Nomad spells them.
const (
	OpEqual          = "="
	OpEqual2         = "=="
	OpIs             = "is"
	OpNotEqual       = "!="
	OpNot            = "not"
	OpLess           = "<"
	OpLessEqual      = "<="
	OpGreater        = ">"
	OpGreaterEqual   = ">="
	OpVersion        = "version"
	OpSemver         = "semver"
	OpRegexp         = "regexp"
	OpSetContains    = "set_contains"
	OpSetContainsAll = "set_contains_all"
	OpSetContainsAny = "set_contains_any"
	OpIsSet          = "is_set"
	OpIsNotSet       = "is_not_set"
	OpDistinctHosts  = "distinct_hosts"
	OpDistinctProp   = "distinct_property"
)

// Operators lists every operator this package understands.
func Operators() []string {
	return []string{OpEqual, OpEqual2, OpIs, OpNotEqual, OpNot, OpLess, OpLessEqual, OpGreater,
		OpGreaterEqual, OpVersion, OpSemver, OpRegexp, OpSetContains, OpSetContainsAll,
		OpSetContainsAny, OpIsSet, OpIsNotSet, OpDistinctHosts, OpDistinctProp}
}

func knownOperator(op string) bool {
	for _, o := range Operators() {
		if o == op {
			return true
		}
	}
	return false
}

// ErrUnsupported marks a constraint this package (and so hetgpu) cannot evaluate faithfully.
var ErrUnsupported = errors.New("unsupported constraint")

func unsupported(c cluster.Constraint, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrUnsupported, c.String(), fmt.Sprintf(format, args...))
}

// NodeTargets are the interpolations valid in job and group constraints (the ${attr.} and
// ${meta.} prefixes take any key).
var NodeTargets = []string{"${node.unique.id}", "${node.unique.name}", "${node.datacenter}",
	"${node.class}", "${node.pool}", "${attr.<key>}", "${meta.<key>}"}

// DeviceTargets are the interpolations valid inside a device block.
var DeviceTargets = []string{"${device.model}", "${device.vendor}", "${device.type}", "${device.ids}",
	"${device.attr.<key>}"}

func validNodeTarget(t string) bool {
	if !strings.HasPrefix(t, "${") {
		return true
	}
	switch t {
	case "${node.unique.id}", "${node.unique.name}", "${node.datacenter}", "${node.class}", "${node.pool}":
		return true
	}
	for _, p := range []string{"${attr.", "${meta."} {
		if strings.HasPrefix(t, p) && strings.HasSuffix(t, "}") && len(t) > len(p)+1 {
			return true
		}
	}
	return false
}

func validDeviceTarget(t string) bool {
	if !strings.HasPrefix(t, "${") {
		return true
	}
	switch t {
	case "${device.model}", "${device.vendor}", "${device.type}", "${device.ids}":
		return true
	}
	p := "${device.attr."
	return strings.HasPrefix(t, p) && strings.HasSuffix(t, "}") && len(t) > len(p)+1
}

// ResolveNode resolves a node-constraint target: a literal stands for itself; an interpolation
// gives the node's value and whether it is set. A missing value is "" (Nomad's convention, which
// matters for != : a missing attribute differs from any non-empty literal).
func ResolveNode(target string, n *cluster.Node) (string, bool) {
	if !strings.HasPrefix(target, "${") {
		return target, true
	}
	switch target {
	case "${node.unique.id}":
		return n.ID, true
	case "${node.unique.name}":
		return n.Name, true
	case "${node.datacenter}":
		return n.Datacenter, true
	case "${node.class}":
		return n.Class, true
	case "${node.pool}":
		return n.Pool, true
	}
	if k, ok := strings.CutPrefix(target, "${attr."); ok {
		v, ok := n.Attributes[strings.TrimSuffix(k, "}")]
		return v, ok
	}
	if k, ok := strings.CutPrefix(target, "${meta."); ok {
		v, ok := n.Meta[strings.TrimSuffix(k, "}")]
		return v, ok
	}
	return "", false
}

// ResolveDevice resolves a device-constraint target on a device group: literals go through
// ParseAttribute; ${device.ids} is every instance ID of the group, comma-joined.
func ResolveDevice(target string, g *cluster.DeviceGroup) (cluster.Attribute, bool) {
	if !strings.HasPrefix(target, "${") {
		return ParseAttribute(target), true
	}
	str := func(s string) cluster.Attribute { return cluster.Attribute{String: &s} }
	switch target {
	case "${device.model}":
		return str(g.Name), true
	case "${device.vendor}":
		return str(g.Vendor), true
	case "${device.type}":
		return str(g.Type), true
	case "${device.ids}":
		ids := make([]string, len(g.Instances))
		for i, in := range g.Instances {
			ids[i] = in.ID
		}
		return str(strings.Join(ids, ",")), true
	}
	if k, ok := strings.CutPrefix(target, "${device.attr."); ok {
		v, ok := g.Attributes[strings.TrimSuffix(k, "}")]
		return v, ok
	}
	return cluster.Attribute{}, false
}

// Node is a compiled job- or group-level constraint on node targets.
type Node struct {
	C  cluster.Constraint
	re *regexp.Regexp
	vc versionCheck
}

// Device is a compiled constraint inside a device request.
type Device struct {
	C  cluster.Constraint
	re *regexp.Regexp
	vc versionCheck
}

type versionCheck interface {
	Check(*version.Version) bool
}

// CompileNode validates a job or group constraint and prepares it for repeated checks.
// distinct_hosts and distinct_property compile but are not checked per node (see the placer);
// Check returns true for them, as Nomad's constraint checker does.
func CompileNode(c cluster.Constraint) (*Node, error) {
	if !knownOperator(c.Operand) {
		return nil, unsupported(c, "operator %q is not one of %s", c.Operand, strings.Join(Operators(), ", "))
	}
	for _, t := range []string{c.LTarget, c.RTarget} {
		if !validNodeTarget(t) {
			return nil, unsupported(c, "target %q is not a node target (%s)", t, strings.Join(NodeTargets, ", "))
		}
	}
	if c.Operand == OpDistinctProp {
		if _, err := DistinctLimit(c); err != nil {
			return nil, err
		}
	}
	n := &Node{C: c}
	var err error
	n.re, n.vc, err = prepare(c, func(t string) (string, bool) {
		if strings.HasPrefix(t, "${") {
			return "", false
		}
		return t, true
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// CompileDevice validates a constraint of a device block and prepares it.
func CompileDevice(c cluster.Constraint) (*Device, error) {
	if !knownOperator(c.Operand) {
		return nil, unsupported(c, "operator %q is not one of %s", c.Operand, strings.Join(Operators(), ", "))
	}
	if c.Operand == OpDistinctHosts || c.Operand == OpDistinctProp {
		return nil, unsupported(c, "Nomad rejects %s inside a device block", c.Operand)
	}
	for _, t := range []string{c.LTarget, c.RTarget} {
		if !validDeviceTarget(t) {
			return nil, unsupported(c, "target %q is not a device target (%s)", t, strings.Join(DeviceTargets, ", "))
		}
	}
	d := &Device{C: c}
	var err error
	d.re, d.vc, err = prepare(c, func(t string) (string, bool) {
		if strings.HasPrefix(t, "${") {
			return "", false
		}
		// Device literals are typed: a regexp or version written as a number is not a string
		// to Nomad and the constraint is false; compile only real strings.
		a := ParseAttribute(t)
		if a.String == nil {
			return "", false
		}
		return *a.String, true
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// prepare compiles a literal right-hand regexp or version constraint once, so a malformed one
// is an error at compile time rather than a silent false on every node.
func prepare(c cluster.Constraint, literal func(string) (string, bool)) (*regexp.Regexp, versionCheck, error) {
	rv, ok := literal(c.RTarget)
	if !ok {
		return nil, nil, nil
	}
	switch c.Operand {
	case OpRegexp:
		re, err := regexp.Compile(rv)
		if err != nil {
			return nil, nil, unsupported(c, "value is not a valid regular expression: %v", err)
		}
		return re, nil, nil
	case OpVersion:
		vc, err := version.NewConstraint(rv)
		if err != nil {
			return nil, nil, unsupported(c, "value is not a version constraint (e.g. \">= 1.2, < 2\"): %v", err)
		}
		return nil, vc, nil
	case OpSemver:
		vc, err := newSemverConstraint(rv)
		if err != nil {
			return nil, nil, unsupported(c, "value is not a semver constraint (e.g. \">= 1.2.0\"): %v", err)
		}
		return nil, vc, nil
	}
	return nil, nil, nil
}

// DistinctHosts reports whether constraints ask for distinct hosts (distinct_hosts with value ""
// or anything but a false boolean, as Nomad reads it).
func DistinctHosts(cs []cluster.Constraint) bool {
	for _, c := range cs {
		if c.Operand != OpDistinctHosts {
			continue
		}
		if c.RTarget == "" {
			return true
		}
		b, err := strconv.ParseBool(c.RTarget)
		return err != nil || b
	}
	return false
}

// DistinctLimit is the most allocations of the job that may share one value of a
// distinct_property constraint's attribute (the value, default 1).
func DistinctLimit(c cluster.Constraint) (int, error) {
	if c.RTarget == "" {
		return 1, nil
	}
	n, err := strconv.ParseUint(c.RTarget, 10, 32)
	if err != nil || n == 0 {
		return 0, unsupported(c, "distinct_property value %q is not a positive integer limit", c.RTarget)
	}
	return int(n), nil
}

// Check evaluates the constraint on a node.
func (n *Node) Check(node *cluster.Node) bool {
	c := n.C
	switch c.Operand {
	case OpDistinctHosts, OpDistinctProp:
		return true
	}
	l, lok := ResolveNode(c.LTarget, node)
	r, rok := ResolveNode(c.RTarget, node)
	switch c.Operand {
	case OpEqual, OpEqual2, OpIs:
		return lok && rok && l == r
	case OpNotEqual, OpNot:
		// Missing values resolve to "" in Nomad, so two missing values are equal.
		return l != r
	case OpLess, OpLessEqual, OpGreater, OpGreaterEqual:
		return lok && rok && orderStrings(c.Operand, l, r)
	case OpIsSet:
		return lok
	case OpIsNotSet:
		return !lok
	case OpVersion, OpSemver:
		return lok && rok && versionMatch(c.Operand, n.vc, l, r)
	case OpRegexp:
		return lok && rok && regexpMatch(n.re, l, r)
	case OpSetContains, OpSetContainsAll:
		return lok && rok && setContainsAll(l, r)
	case OpSetContainsAny:
		return lok && rok && setContainsAny(l, r)
	}
	return false
}

// Check evaluates the constraint on a device group (Nomad's nodeDeviceMatches).
func (d *Device) Check(g *cluster.DeviceGroup) bool {
	l, lok := ResolveDevice(d.C.LTarget, g)
	r, rok := ResolveDevice(d.C.RTarget, g)
	return d.checkAttr(l, r, lok, rok)
}

// InstanceAllowed applies a ${device.ids} constraint to one instance ID the way Nomad's
// createOffer does: the other side is compared against the ID as checkAttributeConstraint(op,
// other, id). Constraints not on ${device.ids} allow every instance.
func (d *Device) InstanceAllowed(g *cluster.DeviceGroup, id string) bool {
	var other cluster.Attribute
	switch {
	case d.C.LTarget == "${device.ids}":
		other, _ = ResolveDevice(d.C.RTarget, g)
	case d.C.RTarget == "${device.ids}":
		other, _ = ResolveDevice(d.C.LTarget, g)
	default:
		return true
	}
	// The ID is the right-hand value here, so nothing compiled from RTarget applies: Nomad
	// would, for regexp, compile the ID as the pattern.
	raw := Device{C: d.C}
	return raw.checkAttr(other, cluster.Attribute{String: &id}, true, true)
}

// OnIDs reports whether the constraint involves ${device.ids} (and so filters instances).
func (d *Device) OnIDs() bool {
	return d.C.LTarget == "${device.ids}" || d.C.RTarget == "${device.ids}"
}

func (d *Device) checkAttr(l, r cluster.Attribute, lok, rok bool) bool {
	switch d.C.Operand {
	case OpNotEqual, OpNot:
		if !lok && !rok {
			return false
		}
		if lok != rok {
			return true
		}
		v, ok := Compare(l, r)
		return ok && v != 0
	case OpEqual, OpEqual2, OpIs, OpLess, OpLessEqual, OpGreater, OpGreaterEqual:
		if !lok || !rok {
			return false
		}
		v, ok := Compare(l, r)
		if !ok {
			return false
		}
		switch d.C.Operand {
		case OpLess:
			return v == -1
		case OpLessEqual:
			return v != 1
		case OpGreater:
			return v == 1
		case OpGreaterEqual:
			return v != -1
		}
		return v == 0
	case OpVersion, OpSemver:
		if !lok || !rok {
			return false
		}
		var ls string
		switch {
		case l.String != nil:
			ls = *l.String
		case l.Int != nil:
			ls = strconv.FormatInt(*l.Int, 10)
		default:
			return false
		}
		if r.String == nil {
			return false
		}
		return versionMatch(d.C.Operand, d.vc, ls, *r.String)
	case OpRegexp, OpSetContains, OpSetContainsAll, OpSetContainsAny:
		if !lok || !rok || l.String == nil || r.String == nil {
			return false
		}
		switch d.C.Operand {
		case OpRegexp:
			return regexpMatch(d.re, *l.String, *r.String)
		case OpSetContainsAny:
			return setContainsAny(*l.String, *r.String)
		}
		return setContainsAll(*l.String, *r.String)
	case OpIsSet:
		return lok
	case OpIsNotSet:
		return !lok
	}
	return false
}

// orderStrings compares node values as integers if both parse, else as floats, else lexically
// (Nomad's checkOrder).
func orderStrings(op, l, r string) bool {
	if li, err := strconv.ParseInt(l, 10, 64); err == nil {
		if ri, err := strconv.ParseInt(r, 10, 64); err == nil {
			return order(op, cmpOrdered(li, ri))
		}
	}
	if lf, err := strconv.ParseFloat(l, 64); err == nil {
		if rf, err := strconv.ParseFloat(r, 64); err == nil {
			switch op { // NaN compares false with everything, as Go's operators do
			case OpLess:
				return lf < rf
			case OpLessEqual:
				return lf <= rf
			case OpGreater:
				return lf > rf
			case OpGreaterEqual:
				return lf >= rf
			}
			return false
		}
	}
	return order(op, strings.Compare(l, r))
}

func cmpOrdered[T int64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func order(op string, v int) bool {
	switch op {
	case OpLess:
		return v < 0
	case OpLessEqual:
		return v <= 0
	case OpGreater:
		return v > 0
	case OpGreaterEqual:
		return v >= 0
	}
	return false
}

func versionMatch(op string, pre versionCheck, l, r string) bool {
	v, err := version.NewVersion(l)
	if err != nil {
		return false
	}
	vc := pre
	if vc == nil {
		var err error
		if op == OpSemver {
			vc, err = newSemverConstraint(r)
		} else {
			vc, err = version.NewConstraint(r)
		}
		if err != nil {
			return false
		}
	}
	return vc.Check(v)
}

func regexpMatch(pre *regexp.Regexp, l, r string) bool {
	re := pre
	if re == nil {
		var err error
		if re, err = regexp.Compile(r); err != nil {
			return false
		}
	}
	return re.MatchString(l)
}

func splitSet(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

func setContainsAll(l, r string) bool { return setContains(l, r, true) }

func setContainsAny(l, r string) bool { return setContains(l, r, false) }

// setContains reports whether the comma-separated set l holds every element of the set r (all)
// or at least one of them (not all).
func setContains(l, r string, all bool) bool {
	have := map[string]bool{}
	for _, p := range splitSet(l) {
		have[p] = true
	}
	for _, p := range splitSet(r) {
		if have[p] != all {
			return !all
		}
	}
	return all
}

// semverConstraint is Nomad's semver operator: comma-separated "<op> <version>" terms with ops
// = != > < >= <= (no ~>), versions strictly semver, ordered by SemVer 2.0 so prereleases are
// ordinary versions (1.3.0-beta1 satisfies >= 0.6.1, unlike the version operator).
type semverConstraint []semverTerm

type semverTerm struct {
	op string
	v  *version.Version
}

func newSemverConstraint(s string) (semverConstraint, error) {
	var out semverConstraint
	for _, part := range strings.Split(s, ",") {
		p := strings.TrimSpace(part)
		op := ""
		for _, o := range []string{">=", "<=", "!=", ">", "<", "="} {
			if rest, ok := strings.CutPrefix(p, o); ok {
				op, p = o, strings.TrimSpace(rest)
				break
			}
		}
		v, err := version.NewSemver(p)
		if err != nil {
			return nil, fmt.Errorf("term %q: %w", strings.TrimSpace(part), err)
		}
		out = append(out, semverTerm{op: op, v: v})
	}
	return out, nil
}

func (sc semverConstraint) Check(v *version.Version) bool {
	for _, t := range sc {
		c := v.Compare(t.v)
		ok := false
		switch t.op {
		case "", "=":
			ok = v.Equal(t.v)
		case "!=":
			ok = !v.Equal(t.v)
		case ">":
			ok = c > 0
		case "<":
			ok = c < 0
		case ">=":
			ok = c >= 0
		case "<=":
			ok = c <= 0
		}
		if !ok {
			return false
		}
	}
	return true
}

// MatchesRequest reports whether a device group serves a job's device name: "<type>",
// "<vendor>/<type>" or "<vendor>/<type>/<name>" (Nomad's RequestedDevice.ID().Matches, where
// empty parts are wildcards). An empty name matches nothing. Every stage that matches a
// request against devices uses it (the ranker once per group and job each round, so it does not
// allocate).
func MatchesRequest(name string, g *cluster.DeviceGroup) bool {
	if name == "" {
		return false
	}
	vendor, typ, model, ok := splitRequest(name)
	if !ok {
		return name == g.Type
	}
	return (vendor == "" || vendor == g.Vendor) && (typ == "" || typ == g.Type) && (model == "" || model == g.Name)
}

// RequestedModel is the device name a request names ("nvidia/gpu/Tesla T4": "Tesla T4"), ""
// when it names none ("gpu", "nvidia/gpu", "nvidia/gpu/"): read as MatchesRequest reads it.
func RequestedModel(name string) string {
	_, _, model, _ := splitRequest(name)
	return model
}

// splitRequest reads "<vendor>/<type>[/<name>]"; ok is false for a bare "<type>". The name
// is everything after the second "/".
func splitRequest(name string) (vendor, typ, model string, ok bool) {
	vendor, rest, ok := strings.Cut(name, "/")
	if !ok {
		return "", "", "", false
	}
	typ, model, _ = strings.Cut(rest, "/")
	return vendor, typ, model, true
}
