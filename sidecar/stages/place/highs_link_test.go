package place

import (
	"math"
	"runtime"
	"testing"

	"github.com/lanl/highs"
)

// TestHiGHSLinked proves libhighs is built, found through pkg-config and solves a MILP:
// maximise 5a + 4b + 3c subject to 2a + 3b + c <= 5, 4a + b + 2c <= 11, 3a + 4b + 2c <= 8,
// a, b, c binary. All three break the first row (6 > 5), so the optimum is a = b = 1, c = 0
// with value 9, ahead of a = c = 1 (8).
func TestHiGHSLinked(t *testing.T) {
	m := highs.Model{
		Maximize: true,
		ColCosts: []float64{5, 4, 3},
		ColLower: []float64{0, 0, 0},
		ColUpper: []float64{1, 1, 1},
		VarTypes: []highs.VariableType{highs.IntegerType, highs.IntegerType, highs.IntegerType},
		RowLower: []float64{math.Inf(-1), math.Inf(-1), math.Inf(-1)},
		RowUpper: []float64{5, 11, 8},
		ConstMatrix: []highs.Nonzero{
			{Row: 0, Col: 0, Val: 2}, {Row: 0, Col: 1, Val: 3}, {Row: 0, Col: 2, Val: 1},
			{Row: 1, Col: 0, Val: 4}, {Row: 1, Col: 1, Val: 1}, {Row: 1, Col: 2, Val: 2},
			{Row: 2, Col: 0, Val: 3}, {Row: 2, Col: 1, Val: 4}, {Row: 2, Col: 2, Val: 2},
		},
	}
	// Through RawModel, kept alive past Solve: lanl/highs v1.0.0's Model.Solve lets the model's
	// finalizer free the Highs object while the solution is still being read.
	raw, err := m.ToRawModel()
	if err != nil {
		t.Fatalf("HiGHS model: %v", err)
	}
	if err := raw.SetBoolOption("output_flag", false); err != nil {
		t.Fatalf("HiGHS option: %v", err)
	}
	sol, err := raw.Solve()
	runtime.KeepAlive(raw)
	if err != nil {
		t.Fatalf("HiGHS solve: %v", err)
	}
	if sol.Status != highs.Optimal {
		t.Fatalf("status %v, want Optimal", sol.Status)
	}
	if math.Abs(sol.Objective-9) > 1e-6 {
		t.Fatalf("objective %v, want 9 (x = %v)", sol.Objective, sol.ColumnPrimal)
	}
	want := []float64{1, 1, 0}
	for i, w := range want {
		if math.Abs(sol.ColumnPrimal[i]-w) > 1e-6 {
			t.Fatalf("x = %v, want %v", sol.ColumnPrimal, want)
		}
	}
}
