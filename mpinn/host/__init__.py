"""The machine and the operating system: how the process was launched (launch), how a command ends (exits), memory
budgets (memory), pages and the heap (heap), hostfiles (hostfile). Nothing here imports numpy at module level."""
