package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// DecisionSeq is the sequence number of the newest decision record (0 when none).
func (s *Store) DecisionSeq() uint64 {
	var n uint64
	_ = s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bHistory).Sequence()
		return nil
	})
	return n
}

// RaiseDecisionSeq makes the next decision record number above n (a replica that becomes
// leader continues the numbering of the one before it, so API readers paging with after=S
// miss nothing). It never lowers the sequence.
func (s *Store) RaiseDecisionSeq(n uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		h := tx.Bucket(bHistory)
		if h.Sequence() >= n {
			return nil
		}
		return h.SetSequence(n)
	})
	if err != nil {
		return fmt.Errorf("raise the decision sequence to %d: %w", n, err)
	}
	return nil
}
