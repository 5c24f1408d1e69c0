package annot

import "github.com/hetgpu/hetgpu/model/cluster"

// The hold constraint keeps an annotated job pending until the sidecar pins it. It asks for a
// node meta key no node carries, so Nomad filters every node and leaves a blocked evaluation
// whose placement failure reads, in the UI and in `nomad job status`:
//
//	Constraint "${meta.hetgpu.queue} = waiting-for-hetgpu": 3 nodes excluded by filter
//
// Write it at job level (all groups wait) or in a group:
//
//	constraint {
//	  attribute = "${meta.hetgpu.queue}"
//	  value     = "waiting-for-hetgpu"
//	}
//
// The sidecar removes it when it pins the job and adds it back when it re-holds one. Never set
// node meta "hetgpu.queue" on a client: a node carrying it would let held jobs start there.
const (
	HoldAttribute = "${meta.hetgpu.queue}"
	HoldValue     = "waiting-for-hetgpu"
	// HoldOperand is Nomad's default operand; "==" and "is" are accepted as synonyms.
	HoldOperand = "="
)

// Hold returns the hold constraint.
func Hold() cluster.Constraint {
	return cluster.Constraint{LTarget: HoldAttribute, Operand: HoldOperand, RTarget: HoldValue}
}

// IsHold reports whether a constraint is the hold constraint (any spelling of equality; an
// empty operand is Nomad's default "=").
func IsHold(ltarget, operand, rtarget string) bool {
	if ltarget != HoldAttribute || rtarget != HoldValue {
		return false
	}
	switch operand {
	case "", "=", "==", "is":
		return true
	}
	return false
}
