package servicetest

import (
	"context"
	"errors"
	"sync"
)

// Leadership is a settable service.Leadership: a replica told whether it leads.
type Leadership struct {
	mu     sync.Mutex
	leads  bool
	leader string
	held   int
}

// Set makes the replica lead or stand by, with the leader's address.
func (l *Leadership) Set(leads bool, leader string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leads, l.leader = leads, leader
}

// HeldCalls counts the fence checks so far.
func (l *Leadership) HeldCalls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// Held is the fence.
func (l *Leadership) Held(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
	if !l.leads {
		return errors.New("not the leader")
	}
	return nil
}

// Role is "leader" or "standby" and the leader's address.
func (l *Leadership) Role() (string, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leads {
		return "leader", l.leader
	}
	return "standby", l.leader
}

// ID names the replica.
func (l *Leadership) ID() string { return "test-replica" }
