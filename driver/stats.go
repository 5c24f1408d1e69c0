package driver

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc: 100 on every Linux ABI Nomad
// supports.
const clockTicks = 100

// procStats computes CPU and memory of a task's process tree from /proc, one TaskStats at a
// time; CPU percentages are over the time since the previous call.
type procStats struct {
	procRoot string
	pageSize uint64
	cpuMHz   float64
	prev     map[int]cpuTicks
	prevT    time.Time
}

type cpuTicks struct {
	start      uint64
	user, syst uint64
}

func newProcStats(procRoot string) *procStats {
	return &procStats{procRoot: procRoot, pageSize: uint64(os.Getpagesize()), cpuMHz: cpuMHz(procRoot)}
}

// cpuMHz is the first core's clock, to express CPU use in Nomad's MHz "ticks".
func cpuMHz(procRoot string) float64 {
	f, err := os.Open(procRoot + "/cpuinfo")
	if err != nil {
		return 1000
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && mhz > 0 {
				return mhz
			}
		}
	}
	return 1000
}

// tree returns the stats of root and all its descendants.
func (p *procStats) tree(root int) []*shim.ProcStat {
	entries, err := os.ReadDir(p.procRoot)
	if err != nil {
		return nil
	}
	children := map[int][]*shim.ProcStat{}
	var top *shim.ProcStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := shim.ReadProcStat(p.procRoot, pid)
		if err != nil {
			continue // exited while we looked
		}
		if pid == root {
			top = st
		}
		children[st.PPID] = append(children[st.PPID], st)
	}
	if top == nil {
		return nil
	}
	out := []*shim.ProcStat{top}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].PID]...)
	}
	return out
}

// sample returns the TaskStats message for the tree under root at now.
func (p *procStats) sample(taskID string, root int, cgroupDir string, now time.Time) *drivers.TaskStats {
	procs := p.tree(root)
	dt := now.Sub(p.prevT).Seconds()
	cur := make(map[int]cpuTicks, len(procs))
	byPID := make(map[string]*drivers.TaskResourceUsage, len(procs))
	agg := &drivers.TaskResourceUsage{Cpu: &drivers.CPUUsage{}, Memory: &drivers.MemoryUsage{}}
	for _, ps := range procs {
		t := cpuTicks{start: ps.StartTime, user: ps.UTime, syst: ps.STime}
		cur[ps.PID] = t
		var userPct, sysPct float64
		if prev, ok := p.prev[ps.PID]; ok && prev.start == t.start && dt > 0 {
			userPct = float64(t.user-prev.user) / clockTicks / dt * 100
			sysPct = float64(t.syst-prev.syst) / clockTicks / dt * 100
		}
		u := &drivers.TaskResourceUsage{
			Cpu:    p.cpu(userPct, sysPct),
			Memory: &drivers.MemoryUsage{Rss: uint64(max(ps.RSSPages, 0)) * p.pageSize, MeasuredFields: []drivers.MemoryUsage_Fields{drivers.MemoryUsage_RSS}},
		}
		byPID[strconv.Itoa(ps.PID)] = u
		agg.Cpu.UserMode += u.Cpu.UserMode
		agg.Cpu.SystemMode += u.Cpu.SystemMode
		agg.Cpu.Percent += u.Cpu.Percent
		agg.Cpu.TotalTicks += u.Cpu.TotalTicks
		agg.Memory.Rss += u.Memory.Rss
	}
	agg.Cpu.MeasuredFields = cpuFields()
	agg.Memory.MeasuredFields = []drivers.MemoryUsage_Fields{drivers.MemoryUsage_RSS}
	if cgroupDir != "" {
		if v, err := shim.CgroupMemoryCurrent(cgroupDir); err == nil {
			agg.Memory.Usage = v
			agg.Memory.MeasuredFields = append(agg.Memory.MeasuredFields, drivers.MemoryUsage_USAGE)
		}
	}
	p.prev, p.prevT = cur, now
	return &drivers.TaskStats{
		Id:                 taskID,
		Timestamp:          timestamppb.New(now),
		AggResourceUsage:   agg,
		ResourceUsageByPid: byPID,
	}
}

func (p *procStats) cpu(userPct, sysPct float64) *drivers.CPUUsage {
	total := userPct + sysPct
	return &drivers.CPUUsage{
		UserMode:       userPct,
		SystemMode:     sysPct,
		Percent:        total,
		TotalTicks:     total / 100 * p.cpuMHz,
		MeasuredFields: cpuFields(),
	}
}

func cpuFields() []drivers.CPUUsage_Fields {
	return []drivers.CPUUsage_Fields{drivers.CPUUsage_USER_MODE, drivers.CPUUsage_SYSTEM_MODE, drivers.CPUUsage_PERCENT, drivers.CPUUsage_TOTAL_TICKS}
}
