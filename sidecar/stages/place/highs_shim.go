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
// HighsInt Highs_passLp(void* highs, const HighsInt num_col, const HighsInt num_row, const HighsInt num_nz, const HighsInt a_format, const HighsInt sense, const double offset, const double* col_cost, const double* col_lower, const double* col_upper, const double* row_lower, const double* row_upper, const HighsInt* a_start, const HighsInt* a_index, const double* a_value);
// HighsInt Highs_passMip(void* highs, const HighsInt num_col, const HighsInt num_row, const HighsInt num_nz, const HighsInt a_format, const HighsInt sense, const double offset, const double* col_cost, const double* col_lower, const double* col_upper, const double* row_lower, const double* row_upper, const HighsInt* a_start, const HighsInt* a_index, const double* a_value, const HighsInt* integrality);
// HighsInt Highs_getModelStatus(const void* highs);
// HighsInt Highs_getSolution(const void* highs, double* col_value, double* col_dual, double* row_value, double* row_dual);
// HighsInt Highs_getIntInfoValue(const void* highs, const char* info, HighsInt* value);
// HighsInt Highs_getInt64InfoValue(const void* highs, const char* info, int64_t* value);
// HighsInt Highs_getDoubleInfoValue(const void* highs, const char* info, double* value);
// HighsInt Highs_getNumCol(const void* highs);
// HighsInt Highs_getNumRow(const void* highs);
// const char* Highs_version(void);
import "C"

import (
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"github.com/lanl/highs"

	_ "github.com/hetgpu/hetgpu/internal/highslink" // finds libhighs at run time
)

// HiGHS constants (highs_c_api.h, HiGHS 1.10): matrix format, objective sense, variable type.
const (
	highsMatrixColwise = 1
	highsSenseMinimize = 1
	highsSenseMaximize = -1
	highsVarInteger    = 1
)

// HiGHS status and model-status values (highs_c_api.h, HiGHS 1.10).
const (
	highsStatusError   = -1
	highsStatusOK      = 0
	highsStatusWarning = 1

	highsModelOptimal    = 7
	highsModelInfeasible = 8
	highsModelTimeLimit  = 13
	// highsModelSolutionLimit also reports the mip_max_nodes limit.
	highsModelSolutionLimit = 16

	highsSolutionFeasible = 2
)

var highsModelStatusNames = map[int]string{
	0: "not set", 1: "load error", 2: "model error", 3: "presolve error", 4: "solve error",
	5: "postsolve error", 6: "model empty", 7: "optimal", 8: "infeasible", 9: "unbounded or infeasible",
	10: "unbounded", 11: "objective bound", 12: "objective target", 13: "time limit",
	14: "iteration limit", 15: "unknown", 16: "solution limit", 17: "interrupt",
}

// HighsVersion is the version of the HiGHS library linked into this binary, as HiGHS reports
// it ("1.10.0"); `hetgpu version` prints it.
func HighsVersion() string {
	return C.GoString(C.Highs_version())
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

// cscMatrix is a model's constraint matrix column by column (HiGHS's own layout), rows
// ascending within a column.
type cscMatrix struct {
	start []C.HighsInt // per column, and the end
	index []C.HighsInt
	value []C.double
}

// newCSC writes mod's matrix column-wise in one counting pass. Every entry must lie inside
// the model.
func newCSC(mod *highs.Model) (*cscMatrix, error) {
	nc, nr := len(mod.ColCosts), len(mod.RowUpper)
	a := &cscMatrix{start: make([]C.HighsInt, nc+1)}
	sorted := true
	prev := 0
	for _, e := range mod.ConstMatrix {
		if e.Col < 0 || e.Col >= nc || e.Row < 0 || e.Row >= nr {
			return nil, fmt.Errorf("HiGHS model: entry (%d, %d) outside %d rows x %d columns", e.Row, e.Col, nr, nc)
		}
		a.start[e.Col+1]++
		sorted = sorted && e.Row >= prev
		prev = e.Row
	}
	for c := 0; c < nc; c++ {
		a.start[c+1] += a.start[c]
	}
	entries := mod.ConstMatrix
	if !sorted {
		entries = slices.Clone(entries)
		slices.SortStableFunc(entries, func(a, b highs.Nonzero) int { return a.Row - b.Row })
	}
	a.index = make([]C.HighsInt, max(len(entries), 1))
	a.value = make([]C.double, max(len(entries), 1))
	next := slices.Clone(a.start[:nc])
	for _, e := range entries {
		p := next[e.Col]
		a.index[p], a.value[p] = C.HighsInt(e.Row), C.double(e.Val)
		next[e.Col]++
	}
	return a, nil
}

// cPtr passes a float64 slice to C in place (float64 and C double share their layout).
func cPtr(x []float64) *C.double {
	if len(x) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(&x[0]))
}

// highsModel passes mod to a new HiGHS object. It does what Model.ToRawModel does, but
// writes the matrix column-wise in one counting pass instead of sorting a copy of the
// triplets: at 256 jobs on 1,024 GPUs that conversion cost about as much as 10 % of the LP
// solve.
func highsModel(mod *highs.Model) (*highs.RawModel, error) {
	for _, t := range mod.VarTypes {
		if t != highs.ContinuousType && t != highs.IntegerType {
			return mod.ToRawModel()
		}
	}
	nc, nr := len(mod.ColCosts), len(mod.RowUpper)
	if len(mod.ColLower) != nc || len(mod.ColUpper) != nc || len(mod.RowLower) != nr ||
		(mod.VarTypes != nil && len(mod.VarTypes) != nc) {
		return nil, fmt.Errorf("HiGHS model: inconsistent lengths (%d columns, %d rows)", nc, nr)
	}
	a, err := newCSC(mod)
	if err != nil {
		return nil, err
	}
	cost, lo, up := mod.ColCosts, mod.ColLower, mod.ColUpper
	start, index, value := a.start, a.index, a.value
	integral := mod.VarTypes
	nnz := int(start[nc])
	raw := highs.NewRawModel()
	if err := raw.SetBoolOption("output_flag", false); err != nil {
		return nil, fmt.Errorf("set HiGHS option output_flag: %w", err)
	}
	sense := C.HighsInt(highsSenseMinimize)
	if mod.Maximize {
		sense = highsSenseMaximize
	}
	var st C.HighsInt
	if integral == nil {
		st = C.Highs_passLp(highsPtr(raw), C.HighsInt(nc), C.HighsInt(nr), C.HighsInt(nnz), highsMatrixColwise, sense,
			C.double(mod.Offset), cPtr(cost), cPtr(lo), cPtr(up), cPtr(mod.RowLower), cPtr(mod.RowUpper),
			&start[0], &index[0], &value[0])
	} else {
		integrality := make([]C.HighsInt, max(nc, 1))
		for i, t := range integral {
			if t == highs.IntegerType {
				integrality[i] = highsVarInteger
			}
		}
		st = C.Highs_passMip(highsPtr(raw), C.HighsInt(nc), C.HighsInt(nr), C.HighsInt(nnz), highsMatrixColwise, sense,
			C.double(mod.Offset), cPtr(cost), cPtr(lo), cPtr(up), cPtr(mod.RowLower), cPtr(mod.RowUpper),
			&start[0], &index[0], &value[0], &integrality[0])
		runtime.KeepAlive(integrality)
	}
	runtime.KeepAlive(raw)
	runtime.KeepAlive(mod)
	runtime.KeepAlive(cost)
	runtime.KeepAlive(lo)
	runtime.KeepAlive(up)
	runtime.KeepAlive(start)
	runtime.KeepAlive(index)
	runtime.KeepAlive(value)
	if int(st) == highsStatusError {
		return nil, fmt.Errorf("HiGHS rejected the model (%d columns, %d rows, %d nonzeros)", nc, nr, nnz)
	}
	return raw, nil
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
