package nomad

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func (b *Backend) explainURL(ns, id string) string {
	if b.cfg.ExplainBaseURL == "" {
		return ""
	}
	u := strings.TrimRight(b.cfg.ExplainBaseURL, "/") + "/v1/jobs/" + url.PathEscape(ns) + "/" + url.PathEscape(id) + "/explain?format=html"
	if b.cfg.SignExplain != nil {
		u += "&" + b.cfg.SignExplain(ns, id)
	}
	return u
}

func nodeNames(as []cluster.Assignment, nodes map[string]cluster.Node) string {
	var names []string
	for _, a := range as {
		n := a.NodeID
		if nd, ok := nodes[a.NodeID]; ok && nd.Name != "" {
			n = nd.Name
		}
		names = append(names, n)
	}
	return strings.Join(names, "+")
}

// DecisionLine formats a decision for the job's ui description.
func DecisionLine(d *cluster.Decision, nodes map[string]cluster.Node, explain string) string {
	var parts []string
	for _, a := range d.Assign {
		n := nodes[a.NodeID]
		name := n.Name
		if name == "" {
			name = a.NodeID
		}
		model := a.DeviceGroup
		for _, g := range n.Devices {
			if g.ID() == a.DeviceGroup {
				model = g.Name
			}
		}
		ids := append([]string(nil), a.InstanceIDs...)
		sort.Strings(ids)
		parts = append(parts, fmt.Sprintf("**%s** (`%s`): %d× %s {%s}", name, shortID(a.NodeID), len(ids), model, strings.Join(ids, ", ")))
	}
	s := "pinned to " + strings.Join(parts, "; ")
	if d.PredThroughput > 0 {
		s += fmt.Sprintf("; predicted %.4g steps/s", d.PredThroughput)
		if d.PredPowerW > 0 {
			s += fmt.Sprintf(" at %.0f W (%.3g J/step)", d.PredPowerW, d.PredPowerW/d.PredThroughput)
		}
	}
	s += fmt.Sprintf("; score %.4g, rank %d", d.Score, d.Rank)
	if d.Shared {
		s += "; shares its GPUs"
	}
	if explain != "" {
		s += fmt.Sprintf(" · [why](%s)", explain)
	}
	return GroupLine(d.Group, s)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
