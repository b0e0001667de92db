// Empty: see cuda_runtime.h beside this file.
#pragma once
