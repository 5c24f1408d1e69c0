package predict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
)

// RecordSchema is the version written in every catalog line; readers reject other versions.
const RecordSchema = 1

// Record sources.
const (
	SourceObserved = "observed"
	SourceSeed     = "seed"
)

// Record is one measured run in the catalog.
type Record struct {
	Schema int `json:"v"`
	// Source is "observed" (a run on this cluster) or "seed" (a bundled published measurement).
	Source string    `json:"source"`
	Time   time.Time `json:"time"`
	// Job is the Nomad job key "namespace/id/group" of an observed run.
	Job             string  `json:"job,omitempty"`
	ModelFamily     string  `json:"model_family,omitempty"`
	ModelName       string  `json:"model_name"`
	BatchSize       int     `json:"batch_size,omitempty"`
	ParamCount      float64 `json:"param_count,omitempty"`
	Framework       string  `json:"framework,omitempty"`
	ComputeDensity  float64 `json:"compute_density,omitempty"`
	MemoryIntensity float64 `json:"memory_intensity,omitempty"`
	CommVolume      float64 `json:"comm_volume,omitempty"`
	// GPUType is the canonical type key, GPUs the job's GPU count.
	GPUType string `json:"gpu_type"`
	GPUs    int    `json:"gpus"`
	// Throughput is the whole job's steps (or samples) per second; 0 means it did not run
	// (out of memory).
	Throughput float64 `json:"throughput"`
	// AvgPowerW is the average power of all the job's GPUs; 0 when not measured.
	AvgPowerW float64 `json:"avg_power_w,omitempty"`
	// EnergyPerStepJ is the energy of all GPUs per step (or sample); 0 when not measured.
	EnergyPerStepJ float64 `json:"energy_per_step_j,omitempty"`
	// CoRunner is the workload that shared the GPUs, if any. Shared runs are kept but do not
	// count as isolated throughput.
	CoRunner string `json:"co_runner,omitempty"`
	// CoRunnerBatchSize is the co-runner's batch size (0: unknown).
	CoRunnerBatchSize int `json:"co_runner_batch_size,omitempty"`
	// Seq is the sidecar store's sequence number of the run (0: not from the store), so a
	// restart can give the catalog the stored runs it lacks.
	Seq uint64 `json:"seq,omitempty"`
	// Measured is the reported throughput when learning bounded it (see ClipFactor).
	Measured float64 `json:"measured,omitempty"`
	// Partial marks a run stopped, preempted or killed before it finished
	// (cluster.Observation.Partial): its throughput is measured over a shorter, less
	// settled stretch, so it counts as PartialWeight of a run towards the workload's own
	// evidence (P2), never makes a slot trusted, and a zero from it does not mean the job
	// cannot run.
	Partial bool `json:"partial,omitempty"`
}

// PartialWeight is how much of a finished run a partial run's throughput counts as.
const PartialWeight = 0.5

// Features returns the record's workload features.
func (r *Record) Features() Features {
	return Features{Family: r.ModelFamily, Name: r.ModelName, BatchSize: r.BatchSize, ParamCount: r.ParamCount,
		Framework: r.Framework, ComputeDensity: r.ComputeDensity, MemoryIntensity: r.MemoryIntensity, CommVolume: r.CommVolume}
}

// Validate reports the first field that makes the record unusable.
func (r *Record) Validate() error {
	switch {
	case r.Schema != RecordSchema:
		return fmt.Errorf("field v = %d, expected %d", r.Schema, RecordSchema)
	case r.Source != SourceObserved && r.Source != SourceSeed:
		return fmt.Errorf("field source = %q, expected %q or %q", r.Source, SourceObserved, SourceSeed)
	case r.ModelName == "":
		return fmt.Errorf("field model_name is empty, expected the model's name")
	case r.BatchSize < 0:
		return fmt.Errorf("field batch_size = %d, expected >= 0", r.BatchSize)
	case gpuspec.Canonical(r.GPUType) == "":
		return fmt.Errorf("field gpu_type = %q, expected a known GPU type", r.GPUType)
	case r.GPUs < 1:
		return fmt.Errorf("field gpus = %d, expected >= 1", r.GPUs)
	case !(r.Throughput >= 0) || math.IsInf(r.Throughput, 0):
		return fmt.Errorf("field throughput = %v, expected a finite number >= 0", r.Throughput)
	case !(r.AvgPowerW >= 0) || math.IsInf(r.AvgPowerW, 0):
		return fmt.Errorf("field avg_power_w = %v, expected a finite number >= 0", r.AvgPowerW)
	case !(r.EnergyPerStepJ >= 0) || math.IsInf(r.EnergyPerStepJ, 0):
		return fmt.Errorf("field energy_per_step_j = %v, expected a finite number >= 0", r.EnergyPerStepJ)
	}
	return nil
}

// RecordFromObservation converts a measured run. Average power comes from the observation,
// else from energy over runtime; energy per step from energy over steps.
func RecordFromObservation(o *cluster.Observation) (Record, error) {
	f := ObservationFeatures(o)
	r := Record{Schema: RecordSchema, Source: SourceObserved, Time: o.Time, Job: o.Key(),
		ModelFamily: f.Family, ModelName: f.Name, BatchSize: f.BatchSize, ParamCount: f.ParamCount, Framework: f.Framework,
		GPUType: gpuspec.TypeOf(o.GPUType), GPUs: o.GPUs, Throughput: o.StepsPerSec(), AvgPowerW: o.AvgPowerW, CoRunner: o.CoRunner,
		CoRunnerBatchSize: o.CoRunnerBatchSize, Partial: o.Partial}
	if r.GPUType == "" {
		r.GPUType = gpuspec.TypeOf(o.GPUName)
	}
	if r.GPUType == "" {
		return Record{}, fmt.Errorf("observation %s: gpu_type = %q (gpu_name %q), expected a known GPU type", r.Job, o.GPUType, o.GPUName)
	}
	if r.AvgPowerW == 0 && o.EnergyJ > 0 && o.RuntimeS > 0 {
		r.AvgPowerW = o.EnergyJ / o.RuntimeS
	}
	if o.EnergyJ > 0 && o.RuntimeS > 0 && r.Throughput > 0 {
		r.EnergyPerStepJ = o.EnergyJ / (r.Throughput * o.RuntimeS)
	} else if r.AvgPowerW > 0 && r.Throughput > 0 {
		r.EnergyPerStepJ = r.AvgPowerW / r.Throughput
	}
	if err := r.Validate(); err != nil {
		return Record{}, fmt.Errorf("observation %s: %w", r.Job, err)
	}
	return r, nil
}

// SeedRecords turns every isolated measurement of a throughput table into seed records: one
// per (job type, GPU type, GPU count). Job types with unparsable names are skipped.
func SeedRecords(t *throughput.Table) []Record {
	var out []Record
	for _, jt := range t.JobTypes() {
		f, err := JobTypeFeatures(jt)
		if err != nil {
			continue
		}
		for _, g := range t.GPUTypes() {
			for _, n := range t.MeasuredCounts(jt, g) {
				v, ok := t.Measured(jt, g, n)
				if !ok {
					continue
				}
				out = append(out, Record{Schema: RecordSchema, Source: SourceSeed, ModelName: f.Name, BatchSize: f.BatchSize,
					GPUType: g, GPUs: n, Throughput: v})
			}
		}
	}
	return out
}

// CatalogOptions configure a catalog.
type CatalogOptions struct {
	// Window is how many observed records are kept, newest first (default 1000). Seeds are
	// not part of the window: they are re-derived from the bundled tables at every start.
	Window int
	// MinSamples is how many observed runs a (workload, GPU type, GPU count) needs before
	// the catalog answers for it directly (default 3). Seeds are trusted as published.
	MinSamples int
}

func (o CatalogOptions) withDefaults() CatalogOptions {
	if o.Window <= 0 {
		o.Window = 1000
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 3
	}
	return o
}

// Catalog is the store of measured runs: fixed seed records plus a sliding window of
// observed ones, kept durable in a JSON-lines file (one Record per line, appended and
// fsynced per batch of runs, compacted to the window when the file holds twice as many).
// JSON lines because the file is small, append-only and readable with any tool. Each line
// ends with its own checksum field ("crc", CRC-32C of the line without it), so a torn or
// altered line is recognised at once; lines without one (older versions) are still read.
// Not safe for concurrent use; the Predictor serialises access.
type Catalog struct {
	opts  CatalogOptions
	seeds []Record
	obs   []Record
	path  string
	lines int
	// maxSeq is the highest store sequence number read or added; legacy counts observed
	// records without one.
	maxSeq uint64
	legacy int
	// Notes say what opening found and fixed (a torn last line cut off, an empty file).
	Notes []string
}

// NewCatalog returns an in-memory catalog over the given seeds.
func NewCatalog(seeds []Record, opts CatalogOptions) *Catalog {
	return &Catalog{opts: opts.withDefaults(), seeds: append([]Record(nil), seeds...)}
}

// OpenCatalog loads (or creates) the JSON-lines file at path. A torn last line, as a crash
// mid-append leaves, is cut off the file (kept in path.torn-<time>) and noted, so the next
// append starts on a fresh line; any other bad line is an error naming it and the repair.
func OpenCatalog(path string, seeds []Record, opts CatalogOptions) (*Catalog, error) {
	c := NewCatalog(seeds, opts)
	c.path = path
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	if len(data) == 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("catalog %s is empty", path))
	}
	rd, err := readCatalog(data, path)
	if err != nil {
		return nil, fmt.Errorf("%w; run `hetgpu state repair` to rebuild the catalog from the sidecar's store", err)
	}
	if rd.good < len(data) {
		aside := path + ".torn-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.WriteFile(aside, data[rd.good:], 0o600); err != nil {
			return nil, fmt.Errorf("catalog %s: keep the torn last line: %w", path, err)
		}
		if err := truncateSync(path, int64(rd.good)); err != nil {
			return nil, fmt.Errorf("catalog %s: cut the torn last line: %w", path, err)
		}
		c.Notes = append(c.Notes, fmt.Sprintf("catalog %s: torn last line (line %d, %d bytes; a crash mid-write) cut off and kept in %s",
			path, rd.lines, len(data)-rd.good, aside))
	}
	c.lines = rd.lines
	for _, r := range rd.recs {
		c.note(r)
		c.push(r)
	}
	return c, nil
}

func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (c *Catalog) note(r Record) {
	if r.Source != SourceObserved {
		return
	}
	if r.Seq == 0 {
		c.legacy++
	}
	c.maxSeq = max(c.maxSeq, r.Seq)
}

// LearnedThrough is the highest store sequence number among the catalog's runs; known is
// false when it holds observed runs but none with a sequence number (an older version's
// file: what the store holds beyond it cannot be told apart).
func (c *Catalog) LearnedThrough() (uint64, bool) {
	return c.maxSeq, c.maxSeq > 0 || c.legacy == 0
}

// crcTable is CRC-32C (Castagnoli), hardware-accelerated on amd64 and arm64.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// crcSuffix ends every line this version writes: `,"crc":"xxxxxxxx"}`.
const crcField = `,"crc":"`

// encodeLine is the record's JSON with its checksum as the last field, and a newline.
func encodeLine(r *Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode catalog record: %w", err)
	}
	sum := crc32.Checksum(b, crcTable)
	out := make([]byte, 0, len(b)+len(crcField)+11)
	out = append(out, b[:len(b)-1]...)
	out = append(out, crcField...)
	out = fmt.Appendf(out, "%08x", sum)
	return append(out, '"', '}', '\n'), nil
}

// decodeLine checks a line's checksum (when it has one) and decodes it.
func decodeLine(b []byte) (Record, error) {
	var r Record
	if i := bytes.LastIndex(b, []byte(crcField)); i >= 0 && len(b) == i+len(crcField)+10 && bytes.HasSuffix(b, []byte(`"}`)) {
		var want uint32
		if _, err := fmt.Sscanf(string(b[i+len(crcField):i+len(crcField)+8]), "%08x", &want); err != nil {
			return r, fmt.Errorf("bad checksum field: %w", err)
		}
		body := append(append([]byte(nil), b[:i]...), '}')
		if got := crc32.Checksum(body, crcTable); got != want {
			return r, fmt.Errorf("checksum %08x does not match the line's %08x (torn or altered)", got, want)
		}
		b = body
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, err
	}
	if dec.More() {
		return r, errors.New("trailing data after the record")
	}
	return r, nil
}

type catalogRead struct {
	recs []Record
	// lines read; good is the byte offset after the last good line.
	lines, good int
}

// readCatalog parses a catalog file. A last line that does not decode (cut short, or failing
// its checksum) is a torn write: reading stops before it. Any other bad line, and a
// complete line with an invalid value, is an error naming it.
func readCatalog(data []byte, name string) (catalogRead, error) {
	var rd catalogRead
	off := 0
	for off < len(data) {
		end := bytes.IndexByte(data[off:], '\n')
		last := end < 0
		if last {
			end = len(data) - off
		}
		line := data[off : off+end]
		next := off + end + 1
		rd.lines++
		if b := bytes.TrimSpace(line); len(b) > 0 {
			r, err := decodeLine(b)
			if err != nil {
				if last || onlySpace(data[min(next, len(data)):]) {
					return rd, nil // torn tail: rd.good stops before it
				}
				return catalogRead{}, fmt.Errorf("catalog %s line %d: %w", name, rd.lines, err)
			}
			// A complete line with a bad value was written so, not torn.
			if err := r.Validate(); err != nil {
				return catalogRead{}, fmt.Errorf("catalog %s line %d: %w", name, rd.lines, err)
			}
			if last {
				// A complete record without its newline: keep it, and the newline goes in
				// before the next append.
				rd.recs = append(rd.recs, r)
				return rd, nil
			}
			rd.recs = append(rd.recs, r)
		}
		rd.good = min(next, len(data))
		off = next
	}
	return rd, nil
}

func onlySpace(b []byte) bool { return len(bytes.TrimSpace(b)) == 0 }

// readRecords reads a whole catalog (tests, tools): the records, the line count and an
// error for any bad line but a torn last one.
func readRecords(rd io.Reader, name string) ([]Record, int, error) {
	data, err := io.ReadAll(io.LimitReader(rd, 1<<30))
	if err != nil {
		return nil, 0, fmt.Errorf("catalog %s: %w", name, err)
	}
	r, err := readCatalog(data, name)
	if err != nil {
		return nil, 0, err
	}
	return r.recs, r.lines, nil
}

// ReadCatalogFile reads a catalog file for inspection (hetgpu state check): its records, and
// whether the last line is torn.
func ReadCatalogFile(path string) (recs []Record, torn bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	rd, err := readCatalog(data, path)
	if err != nil {
		return nil, false, err
	}
	return rd.recs, rd.good < len(data) && !onlySpace(data[rd.good:]), nil
}

// WriteCatalogFile writes records as a catalog file, atomically (write, fsync, rename):
// hetgpu state repair rebuilds the catalog from the store with it.
func WriteCatalogFile(path string, recs []Record) error {
	var buf bytes.Buffer
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return fmt.Errorf("catalog record %d: %w", i, err)
		}
		line, err := encodeLine(&recs[i])
		if err != nil {
			return err
		}
		buf.Write(line)
	}
	return atomicWrite(path, buf.Bytes())
}

func atomicWrite(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write catalog: %w", err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write catalog %s: %w", path, err)
	}
	return nil
}

// push appends to the window, dropping the oldest beyond its size.
func (c *Catalog) push(r Record) {
	c.obs = append(c.obs, r)
	if over := len(c.obs) - c.opts.Window; over > 0 {
		c.obs = append(c.obs[:0], c.obs[over:]...)
	}
}

// Add validates an observed record, appends it to the file and the window.
func (c *Catalog) Add(r Record) error { return c.AddAll([]Record{r}) }

// AddAll validates observed records and appends them to the file in one write and fsync,
// then to the window: all of them, or on error none.
func (c *Catalog) AddAll(rs []Record) error {
	var buf bytes.Buffer
	for i := range rs {
		r := &rs[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("catalog record: %w", err)
		}
		if r.Source != SourceObserved {
			return fmt.Errorf("catalog record: field source = %q, expected %q for an added run", r.Source, SourceObserved)
		}
		if c.path != "" {
			line, err := encodeLine(r)
			if err != nil {
				return err
			}
			buf.Write(line)
		}
	}
	if c.path != "" {
		if err := c.appendFile(buf.Bytes(), len(rs)); err != nil {
			return err
		}
	}
	for _, r := range rs {
		c.note(r)
		c.push(r)
	}
	if c.path != "" && c.lines > 2*c.opts.Window {
		if err := c.compact(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Catalog) appendFile(data []byte, n int) error {
	f, err := os.OpenFile(c.path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("append to catalog: %w", err)
	}
	// A file whose last record lacks its newline (written by hand, or by an older version
	// cut short) gets one first, so the new line never joins it.
	if fi, serr := f.Stat(); serr == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, rerr := f.ReadAt(last, fi.Size()-1); rerr == nil && last[0] != '\n' {
			data = append([]byte{'\n'}, data...)
		}
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append to catalog %s: %w", c.path, err)
	}
	c.lines += n
	return nil
}

// compact rewrites the file with only the window, atomically (write, fsync, rename).
func (c *Catalog) compact() error {
	var buf bytes.Buffer
	for i := range c.obs {
		line, err := encodeLine(&c.obs[i])
		if err != nil {
			return err
		}
		buf.Write(line)
	}
	if err := atomicWrite(c.path, buf.Bytes()); err != nil {
		return fmt.Errorf("compact catalog: %w", err)
	}
	c.lines = len(c.obs)
	return nil
}

// Records returns the seeds followed by the observed window, oldest first.
func (c *Catalog) Records() []Record {
	out := make([]Record, 0, len(c.seeds)+len(c.obs))
	out = append(out, c.seeds...)
	return append(out, c.obs...)
}

// Observed returns the observed window, oldest first.
func (c *Catalog) Observed() []Record { return append([]Record(nil), c.obs...) }

// Options returns the catalog's settings with defaults applied.
func (c *Catalog) Options() CatalogOptions { return c.opts }

// slotStat aggregates the isolated runs of one workload on one GPU type and count.
type slotStat struct {
	// runs counts observed runs with a positive throughput, zeros those that did not run.
	runs, zeros int
	// meanY and m2 are Welford's running mean and sum of squares of log(throughput/gpus).
	meanY, m2 float64
	// seed marks a published measurement seedY (seedZero: published as not running).
	seed, seedZero bool
	seedY          float64
	// partials counts partial runs with a positive throughput, partialSum their
	// log(throughput/gpus).
	partials   int
	partialSum float64
}

func (s *slotStat) add(y float64) {
	s.runs++
	d := y - s.meanY
	s.meanY += d / float64(s.runs)
	s.m2 += d * (y - s.meanY)
}

// value returns the slot's per-GPU log-throughput and whether the catalog trusts it: this
// cluster's own runs once there are minSamples of them, else the published seed.
func (s *slotStat) value(minSamples int) (y float64, trusted bool) {
	switch {
	case s.runs >= minSamples:
		return s.meanY, true
	case s.seed && !s.seedZero:
		return s.seedY, true
	}
	return s.meanY, false
}

// infeasible reports a slot known not to run: a published zero, or only failed runs.
func (s *slotStat) infeasible(minSamples int) bool {
	if s.runs > 0 {
		return false
	}
	return s.seedZero || s.zeros >= minSamples
}

type statKey struct {
	wl  int
	gpu string
	n   int
}

func (a statKey) less(b statKey) bool {
	if a.wl != b.wl {
		return a.wl < b.wl
	}
	if a.gpu != b.gpu {
		return a.gpu < b.gpu
	}
	return a.n < b.n
}

type onGPU struct {
	wl int
	cs []countY
}

type wgKey struct {
	wl  int
	gpu string
}

// countY is one trusted GPU count of a workload on a type with its per-GPU log-throughput.
type countY struct {
	n     int
	log2n float64
	y     float64
}

// index is the catalog aggregated for prediction. It is rebuilt from the records whenever
// they change and is read-only afterwards.
type index struct {
	minSamples int
	wls        []workload
	byKey      map[string]int
	stats      map[statKey]*slotStat
	// trusted per (workload, type): counts ascending.
	trusted map[wgKey][]countY
	// onGPU lists the workloads with trusted data per GPU type, ascending id, with their
	// trusted counts (the same slices as in trusted).
	onGPU map[string][]onGPU
	gpus  []string
	// power per (workload, type): sum of per-GPU load fractions and their count.
	power map[wgKey]*powerStat
	// keys, wgKeys and powerKeys are the keys of stats, trusted and power, sorted.
	keys      []statKey
	wgKeys    []wgKey
	powerKeys []wgKey
	// batchSlope is the typical change of per-GPU log-throughput per doubling of the batch
	// size among workloads of one model on one GPU type and count.
	batchSlope float64
}

type powerStat struct {
	sumFrac float64
	n       int
}

func buildIndex(recs []Record, minSamples int, specs *gpuspec.Table) *index {
	ix := &index{minSamples: minSamples, byKey: map[string]int{}, stats: map[statKey]*slotStat{},
		trusted: map[wgKey][]countY{}, onGPU: map[string][]onGPU{}, power: map[wgKey]*powerStat{}}
	// Workloads in sorted key order, so ids (and every tie-break on them) do not depend on
	// record order.
	keys := map[string]Features{}
	for i := range recs {
		k := workloadKey(recs[i].ModelName, recs[i].BatchSize)
		if f, ok := keys[k]; !ok || f.ParamCount == 0 && recs[i].ParamCount > 0 {
			keys[k] = recs[i].Features()
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		ix.byKey[k] = len(ix.wls)
		ix.wls = append(ix.wls, newWorkload(keys[k]))
	}
	for i := range recs {
		r := &recs[i]
		if _, mig := gpuspec.MIGType(r.GPUType); r.CoRunner != "" || mig {
			continue // shared runs and MIG slices are not the workload alone on a GPU type
		}
		id := ix.byKey[workloadKey(r.ModelName, r.BatchSize)]
		g := gpuspec.Canonical(r.GPUType)
		sk := statKey{id, g, r.GPUs}
		s := ix.stats[sk]
		if s == nil {
			s = &slotStat{}
			ix.stats[sk] = s
		}
		switch {
		case r.Source == SourceSeed && r.Throughput > 0:
			s.seed, s.seedZero, s.seedY = true, false, math.Log(r.Throughput/float64(r.GPUs))
		case r.Source == SourceSeed:
			s.seed, s.seedZero = true, true
		case r.Partial && r.Throughput > 0:
			s.partials++
			s.partialSum += math.Log(r.Throughput / float64(r.GPUs))
		case r.Partial:
			// A stopped run that reports nothing says nothing about whether the job runs.
		case r.Throughput > 0:
			s.add(math.Log(r.Throughput / float64(r.GPUs)))
		default:
			s.zeros++
		}
		if r.AvgPowerW > 0 {
			if sp, ok := specs.Lookup(g); ok && sp.TDPW > sp.IdleW {
				frac := sp.LoadFraction(r.AvgPowerW / float64(r.GPUs))
				wk := wgKey{id, g}
				ps := ix.power[wk]
				if ps == nil {
					ps = &powerStat{}
					ix.power[wk] = ps
				}
				ps.sumFrac += math.Max(0, math.Min(1.2, frac))
				ps.n++
			}
		}
	}
	// Every later pass walks keys in this sorted order: floating-point sums then do not
	// depend on map iteration, so the same records always give the same model.
	ix.keys = make([]statKey, 0, len(ix.stats))
	for sk := range ix.stats {
		ix.keys = append(ix.keys, sk)
	}
	sort.Slice(ix.keys, func(i, j int) bool { return ix.keys[i].less(ix.keys[j]) })
	for _, sk := range ix.keys {
		y, ok := ix.stats[sk].value(minSamples)
		if !ok {
			continue
		}
		wk := wgKey{sk.wl, sk.gpu}
		if len(ix.trusted[wk]) == 0 {
			ix.wgKeys = append(ix.wgKeys, wk)
		}
		ix.trusted[wk] = append(ix.trusted[wk], countY{n: sk.n, log2n: math.Log2(float64(sk.n)), y: y})
	}
	for _, wk := range ix.wgKeys {
		ix.onGPU[wk.gpu] = append(ix.onGPU[wk.gpu], onGPU{wl: wk.wl, cs: ix.trusted[wk]})
	}
	for g := range ix.onGPU {
		ix.gpus = append(ix.gpus, g)
	}
	sort.Strings(ix.gpus)
	for wk := range ix.power {
		ix.powerKeys = append(ix.powerKeys, wk)
	}
	sort.Slice(ix.powerKeys, func(i, j int) bool {
		a, b := ix.powerKeys[i], ix.powerKeys[j]
		return a.wl < b.wl || a.wl == b.wl && a.gpu < b.gpu
	})
	ix.batchSlope = fitBatchSlope(ix)
	return ix
}

// defaultBatchSlope is used when no model was measured at two batch sizes: throughput in
// steps falling as batch^-0.7.
const defaultBatchSlope = -0.7 * math.Ln2

// fitBatchSlope pools, over (model name, GPU type, count) groups with at least two batch
// sizes, the least-squares slope of log-throughput on log2 batch size.
func fitBatchSlope(ix *index) float64 {
	type grp struct {
		name string
		gpu  string
		n    int
	}
	type pts struct{ sx, sy, sxx, sxy, n float64 }
	groups := map[grp]*pts{}
	var order []grp
	for _, wk := range ix.wgKeys {
		cs := ix.trusted[wk]
		w := &ix.wls[wk.wl]
		if w.f.BatchSize <= 0 {
			continue
		}
		x := log2b(w.f.BatchSize)
		for _, c := range cs {
			k := grp{w.name, wk.gpu, c.n}
			g := groups[k]
			if g == nil {
				g = &pts{}
				groups[k] = g
				order = append(order, k)
			}
			g.sx += x
			g.sy += c.y
			g.sxx += x * x
			g.sxy += x * c.y
			g.n++
		}
	}
	var num, den float64
	for _, k := range order {
		g := groups[k]
		if g.n < 2 {
			continue
		}
		vx := g.sxx - g.sx*g.sx/g.n
		if vx <= 1e-9 {
			continue
		}
		num += g.sxy - g.sx*g.sy/g.n
		den += vx
	}
	if den == 0 {
		return defaultBatchSlope
	}
	return num / den
}

func newWorkload(f Features) workload {
	return workload{key: workloadKey(f.Name, f.BatchSize), name: normName(f.Name), family: f.family(), f: f, lb: log2b(f.BatchSize)}
}

// nearestCount returns the trusted count of a workload on a type closest (in doublings) to
// n, ties to the larger count.
func nearestCount(cs []countY, log2n float64) (countY, bool) {
	best, bd := countY{}, math.Inf(1)
	for _, c := range cs {
		d := math.Abs(c.log2n - log2n)
		if d <= bd {
			best, bd = c, d
		}
	}
	return best, !math.IsInf(bd, 1)
}
