package device

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
)

// applicationXID reports XIDs caused by user programs (illegal address, MMU fault, graphics exception...),
// not by the GPU: like NVIDIA's Kubernetes device plugin, they do not make a GPU unhealthy.
func applicationXID(xid uint64) bool {
	switch xid {
	case 13, 31, 43, 45, 68, 109:
		return true
	}
	return false
}

// xidDescription follows NVIDIA's XID catalogue for the errors that take a GPU out of service.
func xidDescription(xid uint64) (string, bool) {
	d, ok := map[uint64]string{
		48:  "double-bit ECC error",
		61:  "internal micro-controller breakpoint/warning",
		62:  "internal micro-controller halt",
		63:  "ECC page retirement or row remapping recording event",
		64:  "ECC page retirement or row remapper recording failure",
		74:  "NVLink error",
		79:  "GPU has fallen off the bus",
		92:  "high single-bit ECC error rate",
		94:  "contained ECC error",
		95:  "uncontained ECC error",
		119: "GSP RPC timeout",
		120: "GSP error",
		140: "unrecovered ECC error",
	}[xid]
	return d, ok
}

// XIDDescription is the health description Nomad shows: "XID 79: GPU has fallen off the bus".
func XIDDescription(xid uint64) string {
	if d, ok := xidDescription(xid); ok {
		return fmt.Sprintf("XID %d: %s", xid, d)
	}
	return fmt.Sprintf("XID %d: critical error", xid)
}

// allInstances is NVML's "whole GPU" value for an event's GPU/compute instance IDs.
const allInstances = 0xFFFFFFFF

// xidEvent is a critical XID for a physical GPU, optionally narrowed to one GPU instance (MIG).
type xidEvent struct {
	uuid string
	gi   int // -1: every instance of the GPU
	xid  uint64
}

// watchXIDs registers for XID critical errors on gpus and reports each non-application XID
// until ctx ends. It returns early if the event set cannot be created (no event support).
func watchXIDs(ctx context.Context, lib nvml.Interface, gpus []*instance, logger hclog.Logger, report func(xidEvent)) {
	set, r := lib.EventSetCreate()
	if r != nvml.SUCCESS {
		logger.Warn("XID health events unavailable; health comes from failing queries only", "error", r.Error())
		return
	}
	defer set.Free()
	uuids := map[nvml.Device]string{}
	for _, g := range gpus {
		if g.handle == nil {
			continue
		}
		types := uint64(nvml.EventTypeXidCriticalError)
		if sup, r := g.handle.GetSupportedEventTypes(); r == nvml.SUCCESS {
			types &= sup
		}
		if types == 0 {
			logger.Debug("GPU does not support XID events", "uuid", g.uuid)
			continue
		}
		if r := g.handle.RegisterEvents(types, set); r != nvml.SUCCESS {
			logger.Warn("cannot register XID events", "uuid", g.uuid, "error", r.Error())
			continue
		}
		uuids[g.handle] = g.uuid
	}
	if len(uuids) == 0 {
		return
	}
	for ctx.Err() == nil {
		// A short wait bounds how long a stopped watcher lingers.
		e, r := set.Wait(500)
		switch {
		case r == nvml.ERROR_TIMEOUT:
			continue
		case r != nvml.SUCCESS:
			if ctx.Err() != nil {
				return
			}
			logger.Warn("waiting for XID events failed; retrying", "error", r.Error())
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if e.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		uuid, ok := uuids[e.Device]
		if !ok && e.Device != nil {
			if u, r := e.Device.GetUUID(); r == nvml.SUCCESS {
				uuid, ok = u, true
			}
		}
		if !ok {
			logger.Warn("XID event for an unknown GPU", "xid", e.EventData)
			continue
		}
		if applicationXID(e.EventData) {
			logger.Info("application XID; GPU stays healthy", "uuid", uuid, "xid", e.EventData)
			continue
		}
		ev := xidEvent{uuid: uuid, gi: -1, xid: e.EventData}
		if e.GpuInstanceId != allInstances {
			ev.gi = int(e.GpuInstanceId)
		}
		logger.Error("GPU critical XID; marking unhealthy", "uuid", uuid, "xid", e.EventData, "gpu_instance", ev.gi,
			"description", XIDDescription(e.EventData))
		report(ev)
	}
}

// healthOf combines sticky XIDs and query faults into Nomad's health description ("" = healthy).
// xids is keyed by physical GPU UUID and GPU instance (-1 = whole GPU).
func healthOf(d *instance, xids map[xidKey]string) string {
	phys := d
	if d.parent != nil {
		phys = d.parent
	}
	if desc, ok := xids[xidKey{phys.uuid, -1}]; ok {
		return desc
	}
	if d.parent != nil {
		if desc, ok := xids[xidKey{phys.uuid, d.gi}]; ok {
			return desc
		}
	}
	if d.fault != "" {
		return d.fault
	}
	return ""
}

type xidKey struct {
	uuid string
	gi   int
}

// probeHealth runs a cheap query on every GPU; a hard failure (e.g. ERROR_GPU_IS_LOST) marks it.
func probeHealth(inv *inventory) {
	for _, g := range inv.physical {
		if g.handle == nil || g.fault != "" {
			continue
		}
		if _, r := g.handle.GetTemperature(nvml.TEMPERATURE_GPU); hardErr(r) {
			g.fault = (&errNVML{"temperature", r}).Error()
		} else if _, r := g.handle.GetPowerUsage(); hardErr(r) {
			g.fault = (&errNVML{"power usage", r}).Error()
		}
	}
	for _, d := range inv.devices {
		if d.parent != nil && d.fault == "" {
			d.fault = d.parent.fault
		}
	}
}
