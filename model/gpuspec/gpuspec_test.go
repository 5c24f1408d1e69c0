package gpuspec

import (
	"math"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	cases := []struct{ in, want string }{
		{"Tesla V100-SXM2-16GB", "v100"},
		{"NVIDIA A100-SXM4-40GB", "a100"},
		{"NVIDIA A100-SXM4-40GB MIG 3g.20gb", "a100"},
		{"NVIDIA A10", "a10"},
		{"NVIDIA H100 80GB HBM3", "h100"},
		{"Tesla T4", "t4"},
		{"Tesla K80", "k80"},
		{"P100-PCIE-16GB", "p100"},
		{"NVIDIA GeForce GT40", ""},
		{"", ""},
	}
	for _, c := range cases {
		if got := Canonical(c.in); got != c.want {
			t.Errorf("Canonical(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDefaultTable(t *testing.T) {
	tab := Default()
	v100, ok := tab.Lookup("Tesla V100-SXM2-32GB")
	if !ok || v100.TDPW != 300 || v100.MemoryGiB != 16 {
		t.Fatalf("Lookup(V100) = %+v, %v; want the first V100 row, 300 W, 16 GiB", v100, ok)
	}
	if got := strings.Join(tab.Types(), ","); got != "a10,a100,h100,h200,k80,l4,p100,t4,v100" {
		t.Fatalf("Types() = %s", got)
	}
	if p := v100.Power(0, 0.7); p != v100.IdleW {
		t.Errorf("Power(0) = %v, want idle %v", p, v100.IdleW)
	}
	if p := v100.Power(1, 0.7); math.Abs(p-300) > 1e-9 {
		t.Errorf("Power(1) = %v, want TDP 300", p)
	}
}

func TestParseErrorsNameField(t *testing.T) {
	hdr := "gpu,memory_gib,mem_bw_gbps,fp32_tflops,fp16_tensor_tflops_dense,tdp_w,idle_w_low,idle_w_high\n"
	_, err := Parse([]byte(hdr + "T4,16,320,8.1,65,lots,9,9\n"))
	if err == nil || !strings.Contains(err.Error(), "tdp_w") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want an error naming line 2 and tdp_w, got %v", err)
	}
	_, err = Parse([]byte(hdr + "Voodoo2,16,320,8.1,65,70,9,9\n"))
	if err == nil || !strings.Contains(err.Error(), "Voodoo2") {
		t.Fatalf("want an error naming the unknown GPU, got %v", err)
	}
}

// Power is PowerAt on util^alpha, and LoadFraction reads a draw back into PowerAt's fraction:
// the predictor learns fractions from measured power and predicts with PowerAt.
func TestPowerCurve(t *testing.T) {
	sp := Spec{IdleW: 30, TDPW: 330}
	for _, tc := range []struct{ util, alpha, want float64 }{
		{0, PowerAlpha, 30},
		{-1, PowerAlpha, 30},
		{1, PowerAlpha, 330},
		{2, PowerAlpha, 330},
		{0.5, 1, 180},
		{BusyUtil, PowerAlpha, 30 + 300*math.Pow(BusyUtil, PowerAlpha)},
	} {
		if got := sp.Power(tc.util, tc.alpha); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Power(%v, %v) = %v, want %v", tc.util, tc.alpha, got, tc.want)
		}
		if tc.util > 0 && tc.util <= 1 {
			frac := math.Pow(tc.util, tc.alpha)
			if got := sp.PowerAt(frac); got != sp.Power(tc.util, tc.alpha) {
				t.Errorf("PowerAt(%v) = %v, Power = %v", frac, got, sp.Power(tc.util, tc.alpha))
			}
			if got := sp.LoadFraction(sp.PowerAt(frac)); math.Abs(got-frac) > 1e-12 {
				t.Errorf("LoadFraction(PowerAt(%v)) = %v", frac, got)
			}
		}
	}
	if got := sp.LoadFraction(15); got != -0.05 {
		t.Errorf("LoadFraction below idle = %v, want -0.05", got)
	}
}

// RuntimeOn scales a runtime by the throughputs of two types, and leaves it where either is
// unknown.
func TestRuntimeOn(t *testing.T) {
	for _, tc := range []struct{ runtime, from, to, want float64 }{
		{3600, 10, 40, 900},
		{3600, 40, 10, 14400},
		{3600, 0, 40, 3600},
		{3600, 10, 0, 3600},
		{3600, math.NaN(), 40, 3600},
		{3600, -1, 40, 3600},
	} {
		if got := RuntimeOn(tc.runtime, tc.from, tc.to); got != tc.want {
			t.Errorf("RuntimeOn(%v, %v, %v) = %v, want %v", tc.runtime, tc.from, tc.to, got, tc.want)
		}
	}
}
