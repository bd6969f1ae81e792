"""Test support shared by the tiers (and by bench/): builders for test objects, the API emulator, the
kubelet stand-in, trainer runs and fault plugins. Test modules import from here, never from each other."""
