"""The live demo of `stackbone dev --demo`: its workspace (short max holds, so expiries show
within a minute) and a loop that keeps example runs going through the real run layer."""
