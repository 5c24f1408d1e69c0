package place

// lanl/highs v1.0.0 cannot pass a start solution to HiGHS, and its RawModel.Solve discards the
// incumbent when Highs_run ends with a warning (time limit). This shim calls the four HiGHS C
// functions it needs on the Highs object behind a RawModel. It declares them itself instead of
// including highs_c_api.h, whose constants are defined (not declared) in the header and would
// clash at link time with lanl/highs's own copy.

// #cgo pkg-config: highs
// #include <stdlib.h>
// #include <stdint.h>
// #include "util/HighsInt.h"
// HighsInt Highs_setSolution(void* highs, const double* col_value, const double* row_value, const double* col_dual, const double* row_dual);
// HighsInt Highs_run(void* highs);
// HighsInt Highs_getModelStatus(const void* highs);
// HighsInt Highs_getSolution(const void* highs, double* col_value, double* col_dual, double* row_value, double* row_dual);
// HighsInt Highs_getIntInfoValue(const void* highs, const char* info, HighsInt* value);
// HighsInt Highs_getInt64InfoValue(const void* highs, const char* info, int64_t* value);
// HighsInt Highs_getDoubleInfoValue(const void* highs, const char* info, double* value);
// HighsInt Highs_getNumCol(const void* highs);
// HighsInt Highs_getNumRow(const void* highs);
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/lanl/highs"
)

// HiGHS status and model-status values (highs_c_api.h, HiGHS 1.10).
const (
	highsStatusError   = -1
	highsStatusOK      = 0
	highsStatusWarning = 1

	highsModelOptimal    = 7
	highsModelInfeasible = 8
	highsModelTimeLimit  = 13

	highsSolutionFeasible = 2
)

var highsModelStatusNames = map[int]string{
	0: "not set", 1: "load error", 2: "model error", 3: "presolve error", 4: "solve error",
	5: "postsolve error", 6: "model empty", 7: "optimal", 8: "infeasible", 9: "unbounded or infeasible",
	10: "unbounded", 11: "objective bound", 12: "objective target", 13: "time limit",
	14: "iteration limit", 15: "unknown", 16: "solution limit", 17: "interrupt",
}

// highsPtr returns the Highs object of a RawModel. RawModel (v1.0.0, pinned in go.mod) is a
// struct whose only field is that pointer; TestWarmStartShim fails if the layout ever changes.
func highsPtr(m *highs.RawModel) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(m))
}

// highsSetStart passes a primal start (one value per column) to HiGHS.
func highsSetStart(m *highs.RawModel, x []float64) error {
	if len(x) == 0 {
		return nil
	}
	st := C.Highs_setSolution(highsPtr(m), (*C.double)(unsafe.Pointer(&x[0])), nil, nil, nil)
	runtime.KeepAlive(m)
	runtime.KeepAlive(x)
	if int(st) == highsStatusError {
		return fmt.Errorf("Highs_setSolution failed")
	}
	return nil
}

// highsResult is what a run left behind.
type highsResult struct {
	RunStatus   int
	ModelStatus int
	// HasPrimal is true when HiGHS holds a feasible primal solution (the incumbent).
	HasPrimal bool
	X         []float64
	Objective float64
	Gap       float64
	Nodes     int64
	LPIters   int64
}

// highsRun runs HiGHS and reads back status, incumbent and statistics, also after a warning.
func highsRun(m *highs.RawModel) (highsResult, error) {
	p := highsPtr(m)
	defer runtime.KeepAlive(m)
	var r highsResult
	r.RunStatus = int(C.Highs_run(p))
	if r.RunStatus == highsStatusError {
		return r, fmt.Errorf("Highs_run returned an error (model status %s)", highsModelStatusNames[int(C.Highs_getModelStatus(p))])
	}
	r.ModelStatus = int(C.Highs_getModelStatus(p))
	var pss C.HighsInt
	if st := infoInt(p, "primal_solution_status", &pss); st == highsStatusOK {
		r.HasPrimal = int(pss) == highsSolutionFeasible
	}
	nc := int(C.Highs_getNumCol(p))
	nr := int(C.Highs_getNumRow(p))
	if r.HasPrimal && nc > 0 {
		x := make([]float64, nc)
		cd := make([]float64, nc)
		rv := make([]float64, max(nr, 1))
		rd := make([]float64, max(nr, 1))
		st := C.Highs_getSolution(p, (*C.double)(unsafe.Pointer(&x[0])), (*C.double)(unsafe.Pointer(&cd[0])),
			(*C.double)(unsafe.Pointer(&rv[0])), (*C.double)(unsafe.Pointer(&rd[0])))
		if int(st) == highsStatusError {
			return r, fmt.Errorf("Highs_getSolution failed")
		}
		r.X = x
	}
	var obj, gap C.double
	infoDouble(p, "objective_function_value", &obj)
	infoDouble(p, "mip_gap", &gap)
	r.Objective, r.Gap = float64(obj), float64(gap)
	var nodes C.int64_t
	cs := C.CString("mip_node_count")
	C.Highs_getInt64InfoValue(p, cs, &nodes)
	C.free(unsafe.Pointer(cs))
	r.Nodes = int64(nodes)
	var iters C.HighsInt
	infoInt(p, "simplex_iteration_count", &iters)
	r.LPIters = int64(iters)
	return r, nil
}

func infoInt(p unsafe.Pointer, name string, v *C.HighsInt) int {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return int(C.Highs_getIntInfoValue(p, cs, v))
}

func infoDouble(p unsafe.Pointer, name string, v *C.double) int {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return int(C.Highs_getDoubleInfoValue(p, cs, v))
}
