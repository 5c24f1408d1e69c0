package device

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// topology is where a device sits; published as the nested "topology" stat object so the
// sidecar's placer can prefer NVLink-connected sets.
type topology struct {
	nvlinkPeers []string // UUIDs of GPUs reachable over NVLink (directly or through NVSwitch)
	numaNode    string   // "0", "1", ... or "" when unknown
	pcieSwitch  string   // shared by GPUs behind one PCIe switch; "" when the GPU shares none
}

// sysfsNUMANode is read when NVML lacks nvmlDeviceGetNumaNodeId (drivers before 535).
func sysfsNUMANode(busID string) string {
	b, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", busID, "numa_node"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func computeTopology(lib nvml.Interface, gpus []*instance) {
	hasNUMA := lib.Extensions().LookupSymbol("nvmlDeviceGetNumaNodeId") == nil
	remotes := make([]map[string]bool, len(gpus))
	// switches: the NVSwitches (PCI bus IDs) a GPU's links reach. Two GPUs are peers through a
	// fabric only if they reach a common switch: a node with two fabrics (an A100 box and an
	// H100 box) has two peer sets. A switch link whose remote is unknown puts the GPU on
	// every fabric, as before.
	switches := make([]map[string]bool, len(gpus))
	anySwitch := make([]bool, len(gpus))
	for i, g := range gpus {
		if g.handle == nil {
			continue
		}
		node := ""
		if hasNUMA {
			if n, r := g.handle.GetNumaNodeId(); r == nvml.SUCCESS {
				node = strconv.Itoa(n)
			}
		}
		if node == "" && g.pciBusID != "" {
			node = sysfsNUMANode(g.pciBusID)
		}
		if node == "-1" {
			node = ""
		}
		g.topo.numaNode = node
		remotes[i], switches[i] = map[string]bool{}, map[string]bool{}
		for l := range nvml.NVLINK_MAX_LINKS {
			st, r := g.handle.GetNvLinkState(l)
			if r != nvml.SUCCESS {
				break
			}
			if st != nvml.FEATURE_ENABLED {
				continue
			}
			if t, r := g.handle.GetNvLinkRemoteDeviceType(l); r == nvml.SUCCESS && t == nvml.NVLINK_DEVICE_TYPE_SWITCH {
				if p, r := g.handle.GetNvLinkRemotePciInfo(l); r == nvml.SUCCESS && normalizeBusID(p) != "" {
					switches[i][normalizeBusID(p)] = true
				} else {
					anySwitch[i] = true
				}
				continue
			}
			if p, r := g.handle.GetNvLinkRemotePciInfo(l); r == nvml.SUCCESS {
				remotes[i][normalizeBusID(p)] = true
			}
		}
	}
	for i, g := range gpus {
		g.topo.nvlinkPeers = nil
		for j, h := range gpus {
			if i == j || g.pciBusID == "" || h.pciBusID == "" {
				continue
			}
			if remotes[i][h.pciBusID] || remotes[j][g.pciBusID] || sameFabric(switches[i], switches[j], anySwitch[i], anySwitch[j]) {
				g.topo.nvlinkPeers = append(g.topo.nvlinkPeers, h.uuid)
			}
		}
	}
	assignPCIeSwitches(gpus)
	for _, g := range gpus {
		slices.Sort(g.topo.nvlinkPeers)
	}
}

// sameFabric reports whether two GPUs reach a common NVSwitch; a GPU with a switch link of
// unknown remote (any) shares a fabric with every switch-connected GPU.
func sameFabric(a, b map[string]bool, anyA, anyB bool) bool {
	onA, onB := anyA || len(a) > 0, anyB || len(b) > 0
	if !onA || !onB {
		return false
	}
	if anyA || anyB {
		return true
	}
	for s := range a {
		if b[s] {
			return true
		}
	}
	return false
}

// assignPCIeSwitches groups GPUs whose closest common ancestor is a PCIe switch (NVML
// TOPOLOGY_SINGLE or TOPOLOGY_MULTIPLE) and labels each group by its lowest PCI bus ID.
func assignPCIeSwitches(gpus []*instance) {
	parent := make([]int, len(gpus))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	for i := range gpus {
		for j := i + 1; j < len(gpus); j++ {
			if gpus[i].handle == nil || gpus[j].handle == nil {
				continue
			}
			lvl, r := gpus[i].handle.GetTopologyCommonAncestor(gpus[j].handle)
			if r == nvml.SUCCESS && (lvl == nvml.TOPOLOGY_SINGLE || lvl == nvml.TOPOLOGY_MULTIPLE) {
				parent[find(i)] = find(j)
			}
		}
	}
	label := map[int]string{}
	size := map[int]int{}
	for i, g := range gpus {
		root := find(i)
		size[root]++
		if l, ok := label[root]; !ok || g.pciBusID < l {
			label[root] = g.pciBusID
		}
	}
	for i, g := range gpus {
		g.topo.pcieSwitch = ""
		if root := find(i); size[root] > 1 && label[root] != "" {
			g.topo.pcieSwitch = "pcie-" + label[root]
		}
	}
}

// deviceTopology is the topology published for a schedulable device: MIG devices take the
// parent's NUMA node and switch but have no NVLink peers (MIG has no peer-to-peer).
func deviceTopology(d *instance) topology {
	if d.parent != nil {
		return topology{numaNode: d.parent.topo.numaNode, pcieSwitch: d.parent.topo.pcieSwitch}
	}
	return d.topo
}
