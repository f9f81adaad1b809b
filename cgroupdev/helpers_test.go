package cgroupdev

import (
	"math/rand/v2"

	"github.com/cudatrace/cudatrace/snapshot"
)

type snapshotProg = snapshot.DeviceProgram

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
