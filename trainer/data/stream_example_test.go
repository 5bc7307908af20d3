package data_test

import (
	"context"
	"fmt"

	"github.com/nomad-train/nomad-train/trainer/data"
)

// letters is a Source of one-byte records "a", "b", ...
type letters int

func (l letters) Len() int { return int(l) }

func (l letters) Record(i int, dst []byte) ([]byte, error) { return append(dst, byte('a'+i)), nil }

// Ten records over three workers in blocks of two: each rank reads three
// records (the tenth is left out so every rank has as many batches), and
// the same split with two workers is again a partition.
func ExampleStreamSplit() {
	for _, world := range []int{3, 2} {
		for rank := 0; rank < world; rank++ {
			s := data.StreamSplit{Source: letters(10), Rank: rank, WorldSize: world, BlockSize: 2}
			st, _ := s.Epoch(context.Background(), 0, 2)
			var got []string
			for b, ok := st.Next(); ok; b, ok = st.Next() {
				for _, r := range b.Records {
					got = append(got, string(r))
				}
			}
			st.Close()
			fmt.Println(world, rank, s.Runs(0), got)
		}
	}
	// Output:
	// 3 0 [{0 3}] [a b c]
	// 3 1 [{3 6}] [d e f]
	// 3 2 [{6 9}] [g h i]
	// 2 0 [{0 5}] [a b c d e]
	// 2 1 [{5 10}] [f g h i j]
}
