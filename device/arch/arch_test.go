package arch

import "testing"

func TestCoresPerSM(t *testing.T) {
	cases := []struct{ major, minor, want int }{
		{3, 7, 192}, // K80
		{6, 0, 64},  // P100
		{7, 0, 64},  // V100
		{7, 5, 64},  // T4
		{8, 0, 64},  // A100
		{8, 6, 128}, // A10
		{9, 0, 128}, // H100
	}
	for _, c := range cases {
		if got := CoresPerSM(c.major, c.minor); got != c.want {
			t.Errorf("CoresPerSM(%d.%d) = %d, want %d", c.major, c.minor, got, c.want)
		}
	}
}
