// Package english spells counts in the messages nomad-train prints.
package english

import "strconv"

// Plural returns one when n is 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Count returns n followed by the noun in its number: "1 restart",
// "2 restarts", "0 restarts".
func Count(n int, one, many string) string {
	return strconv.Itoa(n) + " " + Plural(n, one, many)
}
