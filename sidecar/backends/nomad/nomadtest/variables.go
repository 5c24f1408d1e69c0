package nomadtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Nomad's limits and lock timing, as the real agent applies them (nomad/structs/variables.go,
// nomad/locks.go).
const (
	maxVariableSize = 65536
	minLockTTL      = 10 * time.Second
	defaultLockTTL  = 15 * time.Second
	defaultDelay    = 15 * time.Second
)

// fakeVar is a stored variable; the lock's timer runs on the fake's clock: Nomad lets a
// lock's TTL timer run 2 x TTL after the last renewal, then blocks it for LockDelay, then
// removes it.
type fakeVar struct {
	v *api.Variable
	// renewed is when the lock was acquired or last renewed.
	renewed    time.Time
	ttl, delay time.Duration
}

// SetClock sets the clock lock timers run on and device stats are stamped with (default
// time.Now).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

func (s *Server) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// Variable returns a copy of a stored variable, nil when none.
func (s *Server) Variable(ns, path string) *api.Variable {
	s.mu.Lock()
	defer s.mu.Unlock()
	fv := s.vars[ns+"/"+path]
	if fv == nil {
		return nil
	}
	s.expireLock(fv)
	return clone(fv.v)
}

// VariablePaths lists the stored variables' paths under prefix.
func (s *Server) VariablePaths(ns, prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, fv := range s.vars {
		if strings.HasPrefix(k, ns+"/") && strings.HasPrefix(fv.v.Path, prefix) {
			out = append(out, fv.v.Path)
		}
	}
	return out
}

// expireLock drops a lock whose TTL timer (2 x TTL) and delay both ran out. Callers hold mu.
func (s *Server) expireLock(fv *fakeVar) {
	if fv.v.Lock != nil && !s.clock().Before(fv.renewed.Add(2*fv.ttl+fv.delay)) {
		fv.v.Lock = nil
	}
}

// timerRunning: the lock's TTL timer has not fired yet (renewals still count). Callers hold mu.
func (s *Server) timerRunning(fv *fakeVar) bool {
	return fv.v.Lock != nil && s.clock().Before(fv.renewed.Add(2*fv.ttl))
}

// casFailed answers a write whose ?cas=N is malformed (400) or is not the variable's modify
// index (0 for none: conflict answers 409); it reports whether it answered.
func casFailed(w http.ResponseWriter, q url.Values, fv *fakeVar, conflict func()) bool {
	c := q.Get("cas")
	if c == "" {
		return false
	}
	n, err := strconv.ParseUint(c, 10, 64)
	if err != nil {
		varError(w, http.StatusBadRequest, "can not parse cas: "+err.Error())
		return true
	}
	cur := uint64(0)
	if fv != nil {
		cur = fv.v.ModifyIndex
	}
	if n != cur {
		conflict()
		return true
	}
	return false
}

// holdsLock answers a lock renewal or release of a missing (404) or unlocked (409) variable;
// it reports whether the variable holds a lock.
func holdsLock(w http.ResponseWriter, fv *fakeVar) bool {
	switch {
	case fv == nil:
		varError(w, http.StatusNotFound, "variable not found")
	case fv.v.Lock == nil:
		varError(w, http.StatusConflict, "variable doesn't hold a lock")
	default:
		return true
	}
	return false
}

func varError(w http.ResponseWriter, code int, msg string) {
	http.Error(w, msg, code)
}

// variable answers /v1/var/<path>: GET, PUT (set, ?cas=N, ?lock-acquire, ?lock-renew,
// ?lock-release) and DELETE (?cas=N), with the real agent's status codes: 404 for a
// missing variable, 409 with the conflicting variable for CAS and lock conflicts, 400 for
// a lock on a plain write, items above 64 KiB or a lock TTL outside 10 s to 24 h.
func (s *Server) variable(w http.ResponseWriter, r *http.Request, ns, path string) {
	q := r.URL.Query()
	key := ns + "/" + path
	s.mu.Lock()
	defer s.mu.Unlock()
	fv := s.vars[key]
	if fv != nil {
		s.expireLock(fv)
	}
	reply := func(code int, v any) {
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(s.index, 10))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	conflict := func() {
		// The holder's items are not shown to a writer that lost.
		reply(http.StatusConflict, &api.Variable{Namespace: ns, Path: path})
	}
	switch r.Method {
	case http.MethodGet:
		if fv == nil {
			varError(w, http.StatusNotFound, "variable not found")
			return
		}
		reply(http.StatusOK, fv.v)
		return
	case http.MethodDelete:
		if fv == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if fv.v.Lock != nil {
			conflict()
			return
		}
		if casFailed(w, q, fv, func() { reply(http.StatusConflict, fv.v) }) {
			return
		}
		delete(s.vars, key)
		s.bump()
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(s.index, 10))
		w.WriteHeader(http.StatusNoContent)
		return
	case http.MethodPut, http.MethodPost:
	default:
		varError(w, http.StatusBadRequest, "Invalid method")
		return
	}
	var in api.Variable
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		varError(w, http.StatusBadRequest, err.Error())
		return
	}
	_, renew := q["lock-renew"]
	_, acquire := q["lock-acquire"]
	_, release := q["lock-release"]
	if (renew || acquire || release) && q.Get("cas") != "" {
		varError(w, http.StatusBadRequest, "CAS can't be used with lock operations")
		return
	}
	size := 0
	for k, v := range in.Items {
		size += len(k) + len(v)
	}
	if size > maxVariableSize {
		varError(w, http.StatusBadRequest, "variables are limited to 64KiB in total size")
		return
	}
	switch {
	case renew:
		if !holdsLock(w, fv) {
			return
		}
		// A lock whose timer fired cannot be renewed any more (it waits out its delay).
		if in.Lock == nil || in.Lock.ID != fv.v.Lock.ID || !s.timerRunning(fv) {
			varError(w, http.StatusConflict, "attempting to modify locked variable")
			return
		}
		fv.renewed = s.clock()
		reply(http.StatusOK, fv.v.Metadata())
	case release:
		if in.Lock == nil || in.Lock.ID == "" {
			varError(w, http.StatusBadRequest, "missing lock information")
			return
		}
		if !holdsLock(w, fv) {
			return
		}
		if fv.v.Lock.ID != in.Lock.ID {
			conflict()
			return
		}
		s.bump()
		fv.v.Lock, fv.v.ModifyIndex = nil, s.index
		reply(http.StatusOK, fv.v)
	case acquire:
		if fv != nil && fv.v.Lock != nil && (in.Lock == nil || in.Lock.ID != fv.v.Lock.ID) {
			conflict()
			return
		}
		lk := &api.VariableLock{}
		if in.Lock != nil {
			*lk = *in.Lock
		}
		ttl, delay := defaultLockTTL, defaultDelay
		var err error
		if lk.TTL != "" {
			if ttl, err = time.ParseDuration(lk.TTL); err != nil {
				varError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		if lk.LockDelay != "" {
			if delay, err = time.ParseDuration(lk.LockDelay); err != nil {
				varError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		if ttl < minLockTTL || ttl > 24*time.Hour {
			varError(w, http.StatusBadRequest, "1 error occurred:\n\t* TTL must be between 10 seconds and 24 hours\n\n")
			return
		}
		if lk.ID == "" {
			s.lockSeq++
			lk.ID = fmt.Sprintf("lock-%04d", s.lockSeq)
		}
		lk.TTL, lk.LockDelay = ttl.String(), delay.String()
		s.bump()
		nv := &api.Variable{Namespace: ns, Path: path, Items: in.Items, Lock: lk, ModifyIndex: s.index, CreateIndex: s.index}
		if fv != nil {
			nv.CreateIndex = fv.v.CreateIndex
		}
		s.vars[key] = &fakeVar{v: nv, renewed: s.clock(), ttl: ttl, delay: delay}
		reply(http.StatusOK, nv)
	default:
		if len(in.Items) == 0 {
			varError(w, http.StatusBadRequest, "variable missing required Items object")
			return
		}
		if in.Lock != nil && (in.Lock.TTL != "" || in.Lock.LockDelay != "") {
			varError(w, http.StatusBadRequest, "variable should not contain lock definition")
			return
		}
		current := &api.Variable{Namespace: ns, Path: path}
		if fv != nil {
			current = fv.v
		}
		if casFailed(w, q, fv, func() { reply(http.StatusConflict, current) }) {
			return
		}
		if fv != nil && fv.v.Lock != nil && (in.Lock == nil || in.Lock.ID != fv.v.Lock.ID) {
			conflict()
			return
		}
		s.bump()
		nv := &api.Variable{Namespace: ns, Path: path, Items: in.Items, ModifyIndex: s.index, CreateIndex: s.index}
		if fv != nil {
			nv.CreateIndex, nv.Lock = fv.v.CreateIndex, fv.v.Lock
			fv.v = nv
		} else {
			s.vars[key] = &fakeVar{v: nv}
		}
		reply(http.StatusOK, nv)
	}
}
