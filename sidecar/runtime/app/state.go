package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
)

// State file names in a state directory.
const (
	StateFile   = "sidecar.db"
	CatalogFile = "catalog.jsonl"
)

// StateReport is what CheckState found in a state directory.
type StateReport struct {
	Dir     string        `json:"dir"`
	Store   *store.Report `json:"store"`
	Catalog CatalogReport `json:"catalog"`
}

// CatalogReport describes the predictor's catalog file.
type CatalogReport struct {
	Path    string `json:"path"`
	Missing bool   `json:"missing,omitempty"`
	Records int    `json:"records"`
	// LearnedThrough is the newest store sequence number the catalog holds.
	LearnedThrough uint64 `json:"learned_through,omitempty"`
	Torn           bool   `json:"torn_last_line,omitempty"`
	Problem        string `json:"problem,omitempty"`
}

// OK reports a state directory the sidecar can start from as it is.
func (r *StateReport) OK() bool { return r.Store.OK() && r.Catalog.Problem == "" }

// CheckState inspects a state directory's store and catalog without changing them (the
// sidecar must not be running: the store is locked while it does).
func CheckState(dir string) (*StateReport, error) {
	rep := &StateReport{Dir: dir}
	var err error
	if rep.Store, err = store.Check(filepath.Join(dir, StateFile)); err != nil {
		return nil, err
	}
	rep.Catalog = checkCatalog(filepath.Join(dir, CatalogFile))
	return rep, nil
}

func checkCatalog(path string) CatalogReport {
	cr := CatalogReport{Path: path}
	recs, torn, err := predict.ReadCatalogFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		cr.Missing = true
	case err != nil:
		cr.Problem = err.Error()
	default:
		cr.Records, cr.Torn = len(recs), torn
		for _, r := range recs {
			cr.LearnedThrough = max(cr.LearnedThrough, r.Seq)
		}
	}
	return cr
}

// RepairReport is what RepairState did.
type RepairReport struct {
	Store *store.RepairReport `json:"store"`
	// CatalogKeptAs is where the old catalog went; CatalogRuns how many stored runs the
	// rebuilt catalog learned.
	CatalogKeptAs string `json:"catalog_kept_as,omitempty"`
	CatalogRuns   int    `json:"catalog_runs"`
	Rebuilt       bool   `json:"catalog_rebuilt"`
}

// RepairState repairs a state directory: the store as store.Repair does (the damaged file
// kept), then, when the catalog is unreadable or the store was repaired (or force), the
// catalog is rebuilt from the store's runs through the predictor's bounded learning (the old
// one kept as catalog.jsonl.old-<time>). The sidecar must not be running.
func RepairState(ctx context.Context, dir string, pc PredictorConfig, force bool, log hclog.Logger) (*RepairReport, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	dbPath, catPath := filepath.Join(dir, StateFile), filepath.Join(dir, CatalogFile)
	sr, err := store.Repair(dbPath)
	if err != nil {
		return nil, err
	}
	out := &RepairReport{Store: sr}
	cr := checkCatalog(catPath)
	if !force && cr.Problem == "" && sr.KeptAs == "" {
		return out, nil
	}
	if !cr.Missing {
		out.CatalogKeptAs = catPath + ".old-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(catPath, out.CatalogKeptAs); err != nil {
			return nil, fmt.Errorf("repair catalog %s: keep the old one: %w", catPath, err)
		}
	}
	st, err := store.Open(dbPath, store.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	pred, err := predict.New(predict.Options{CatalogPath: catPath, ClipFactor: predict.ClipFactor, Logger: log,
		Catalog: predict.CatalogOptions{Window: pc.Window, MinSamples: pc.MinSamples}})
	if err != nil {
		return nil, fmt.Errorf("repair catalog: %w", err)
	}
	if out.CatalogRuns, err = service.Replay(ctx, st, pred, 0, nil); err != nil {
		return nil, fmt.Errorf("repair catalog from the store: %w", err)
	}
	out.Rebuilt = true
	return out, nil
}
