package telemetry

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// SavedLimit is a GPU's power limit before the task changed it, to restore afterwards.
type SavedLimit struct {
	UUID       string `json:"uuid"`
	PreviousMW uint32 `json:"previous_mw"`
	AppliedMW  uint32 `json:"applied_mw"`
}

// ApplyPowerLimit caps every GPU at watts. It validates the cap against each GPU's settable
// range first, so a bad value changes nothing, and returns what to restore. On a failure
// midway the GPUs already changed are restored before returning the error.
func ApplyPowerLimit(gpus []GPU, watts float64) ([]SavedLimit, error) {
	mw := uint32(watts*1000 + 0.5)
	saved := make([]SavedLimit, 0, len(gpus))
	for _, g := range gpus {
		var lo, hi uint32
		ret := safeRet(func() nvml.Return {
			var r nvml.Return
			lo, hi, r = g.dev.GetPowerManagementLimitConstraints()
			return r
		})
		if ret == nvml.SUCCESS && (mw < lo || mw > hi) {
			return nil, fmt.Errorf("power_limit = %g W is outside %s's settable range %g..%g W", watts, g.label(), float64(lo)/1000, float64(hi)/1000)
		}
		cur, ret := safeU32(g.dev.GetPowerManagementLimit)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("power_limit: read the current limit of %s: %s", g.label(), nvml.ErrorString(ret))
		}
		saved = append(saved, SavedLimit{UUID: g.UUID, PreviousMW: cur, AppliedMW: mw})
	}
	for i, g := range gpus {
		if ret := safeRet(func() nvml.Return { return g.dev.SetPowerManagementLimit(mw) }); ret != nvml.SUCCESS {
			_ = RestorePowerLimits(gpus[:i], saved[:i])
			return nil, fmt.Errorf("power_limit: set %g W on %s: %s (setting power limits needs root)", watts, g.label(), nvml.ErrorString(ret))
		}
	}
	return saved, nil
}

// RestorePowerLimits puts back the limits ApplyPowerLimit replaced. A GPU whose limit was
// changed again by someone else since is left alone: the newer setting wins.
func RestorePowerLimits(gpus []GPU, saved []SavedLimit) error {
	byUUID := make(map[string]GPU, len(gpus))
	for _, g := range gpus {
		byUUID[g.UUID] = g
	}
	var firstErr error
	for _, s := range saved {
		g, ok := byUUID[s.UUID]
		if !ok {
			continue
		}
		if cur, ret := safeU32(g.dev.GetPowerManagementLimit); ret == nvml.SUCCESS && cur != s.AppliedMW {
			continue
		}
		if ret := safeRet(func() nvml.Return { return g.dev.SetPowerManagementLimit(s.PreviousMW) }); ret != nvml.SUCCESS && firstErr == nil {
			firstErr = fmt.Errorf("restore power limit %g W on %s: %s", float64(s.PreviousMW)/1000, g.label(), nvml.ErrorString(ret))
		}
	}
	return firstErr
}

func (g GPU) label() string {
	if g.Name != "" {
		return g.Name + " " + g.UUID
	}
	return g.UUID
}
