package fake

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// handle is the nvml.Device the fleet hands out. go-nvml's moq mocks record the arguments of
// every call forever; a plugin polling stats for days would grow without bound. handle calls the
// configured functions directly for every method with arguments that the plugin polls
// (argument-less calls record zero-size entries, which cost no memory).
type handle struct {
	*server.Device
}

var _ nvml.Device = (*handle)(nil)

func (h *handle) GetClockInfo(c nvml.ClockType) (uint32, nvml.Return) { return h.GetClockInfoFunc(c) }
func (h *handle) GetMaxClockInfo(c nvml.ClockType) (uint32, nvml.Return) {
	return h.GetMaxClockInfoFunc(c)
}
func (h *handle) GetTemperature(s nvml.TemperatureSensors) (uint32, nvml.Return) {
	return h.GetTemperatureFunc(s)
}
func (h *handle) GetTotalEccErrors(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
	return h.GetTotalEccErrorsFunc(t, c)
}
func (h *handle) GetNvLinkState(l int) (nvml.EnableState, nvml.Return) {
	return h.GetNvLinkStateFunc(l)
}
func (h *handle) GetNvLinkRemotePciInfo(l int) (nvml.PciInfo, nvml.Return) {
	return h.GetNvLinkRemotePciInfoFunc(l)
}
func (h *handle) GetNvLinkRemoteDeviceType(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
	return h.GetNvLinkRemoteDeviceTypeFunc(l)
}
func (h *handle) GetTopologyCommonAncestor(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
	return h.GetTopologyCommonAncestorFunc(o)
}
func (h *handle) RegisterEvents(t uint64, s nvml.EventSet) nvml.Return {
	return h.RegisterEventsFunc(t, s)
}
func (h *handle) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	return h.GetProcessUtilizationFunc(lastSeen)
}
func (h *handle) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	return h.GetMigDeviceHandleByIndexFunc(i)
}

// DeviceGetHandleByIndex shadows the mock's recording version for the same reason.
func (f *Fleet) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	return f.DeviceGetHandleByIndexFunc(i)
}

// DeviceGetHandleByUUID shadows the mock's recording version: the driver looks up a shared
// GPU by UUID every sampling interval.
func (f *Fleet) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	return f.DeviceGetHandleByUUIDFunc(uuid)
}

// Wait shadows the mock's recording version: the plugin waits twice a second forever.
func (s *eventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) { return s.WaitFunc(timeoutMs) }
