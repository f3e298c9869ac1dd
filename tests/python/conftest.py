import os
import sys

# Run from a source checkout without installing: the package is in python/, the library in build/.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
