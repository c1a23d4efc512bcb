// A test stand-in for the Windows SDK's DirectML.h: only the declarations gatepack's generated
// desc.cpp uses, transcribed from Microsoft's documentation of each struct and enum
// (learn.microsoft.com/windows/win32/api/directml/, e.g. ns-directml-dml_gru_operator_desc).
// Enum values are the documented ones (CONVENTIONS.md section 4). It lets the tests compile and run
// the generated C++ on Linux; it is not DirectML.
#pragma once
#include <cstdint>

typedef uint32_t UINT;
typedef uint64_t UINT64;
typedef int BOOL;
typedef float FLOAT;
#define TRUE 1
#define FALSE 0

enum DML_TENSOR_DATA_TYPE { DML_TENSOR_DATA_TYPE_UNKNOWN = 0, DML_TENSOR_DATA_TYPE_FLOAT32 = 1, DML_TENSOR_DATA_TYPE_FLOAT16 = 2, DML_TENSOR_DATA_TYPE_UINT32 = 3 };
enum DML_TENSOR_TYPE { DML_TENSOR_TYPE_INVALID = 0, DML_TENSOR_TYPE_BUFFER = 1 };
enum DML_TENSOR_FLAGS { DML_TENSOR_FLAG_NONE = 0, DML_TENSOR_FLAG_OWNED_BY_DML = 1 };
enum DML_RECURRENT_NETWORK_DIRECTION { DML_RECURRENT_NETWORK_DIRECTION_FORWARD = 0, DML_RECURRENT_NETWORK_DIRECTION_BACKWARD = 1, DML_RECURRENT_NETWORK_DIRECTION_BIDIRECTIONAL = 2 };
enum DML_OPERATOR_TYPE {
    DML_OPERATOR_INVALID = 0,
    DML_OPERATOR_ACTIVATION_ELU = 35, DML_OPERATOR_ACTIVATION_HARD_SIGMOID = 37, DML_OPERATOR_ACTIVATION_LEAKY_RELU = 39,
    DML_OPERATOR_ACTIVATION_LINEAR = 40, DML_OPERATOR_ACTIVATION_RELU = 44, DML_OPERATOR_ACTIVATION_SCALED_TANH = 46,
    DML_OPERATOR_ACTIVATION_SIGMOID = 47, DML_OPERATOR_ACTIVATION_SOFTPLUS = 49, DML_OPERATOR_ACTIVATION_SOFTSIGN = 50,
    DML_OPERATOR_ACTIVATION_TANH = 51, DML_OPERATOR_ACTIVATION_THRESHOLDED_RELU = 52,
    DML_OPERATOR_RNN = 76, DML_OPERATOR_LSTM = 77, DML_OPERATOR_GRU = 78,
};

struct DML_BUFFER_TENSOR_DESC {
    DML_TENSOR_DATA_TYPE DataType; DML_TENSOR_FLAGS Flags; UINT DimensionCount; const UINT* Sizes; const UINT* Strides;
    UINT64 TotalTensorSizeInBytes; UINT GuaranteedBaseOffsetAlignment;
};
struct DML_TENSOR_DESC { DML_TENSOR_TYPE Type; const void* Desc; };
struct DML_OPERATOR_DESC { DML_OPERATOR_TYPE Type; const void* Desc; };

#define GATEPACK_STUB_ACTIVATION(NAME, FIELDS) \
    struct DML_ACTIVATION_##NAME##_OPERATOR_DESC { const DML_TENSOR_DESC* InputTensor; const DML_TENSOR_DESC* OutputTensor; FIELDS };
GATEPACK_STUB_ACTIVATION(ELU, FLOAT Alpha;)
GATEPACK_STUB_ACTIVATION(HARD_SIGMOID, FLOAT Alpha; FLOAT Beta;)
GATEPACK_STUB_ACTIVATION(LEAKY_RELU, FLOAT Alpha;)
GATEPACK_STUB_ACTIVATION(LINEAR, FLOAT Alpha; FLOAT Beta;)
GATEPACK_STUB_ACTIVATION(RELU, )
GATEPACK_STUB_ACTIVATION(SCALED_TANH, FLOAT Alpha; FLOAT Beta;)
GATEPACK_STUB_ACTIVATION(SIGMOID, )
GATEPACK_STUB_ACTIVATION(SOFTPLUS, FLOAT Steepness;)
GATEPACK_STUB_ACTIVATION(SOFTSIGN, )
GATEPACK_STUB_ACTIVATION(TANH, )
GATEPACK_STUB_ACTIVATION(THRESHOLDED_RELU, FLOAT Alpha;)

struct DML_GRU_OPERATOR_DESC {
    const DML_TENSOR_DESC* InputTensor; const DML_TENSOR_DESC* WeightTensor; const DML_TENSOR_DESC* RecurrenceTensor;
    const DML_TENSOR_DESC* BiasTensor; const DML_TENSOR_DESC* HiddenInitTensor; const DML_TENSOR_DESC* SequenceLengthsTensor;
    const DML_TENSOR_DESC* OutputSequenceTensor; const DML_TENSOR_DESC* OutputSingleTensor;
    UINT ActivationDescCount; const DML_OPERATOR_DESC* ActivationDescs; DML_RECURRENT_NETWORK_DIRECTION Direction; BOOL LinearBeforeReset;
};
struct DML_LSTM_OPERATOR_DESC {
    const DML_TENSOR_DESC* InputTensor; const DML_TENSOR_DESC* WeightTensor; const DML_TENSOR_DESC* RecurrenceTensor;
    const DML_TENSOR_DESC* BiasTensor; const DML_TENSOR_DESC* HiddenInitTensor; const DML_TENSOR_DESC* CellMemInitTensor;
    const DML_TENSOR_DESC* SequenceLengthsTensor; const DML_TENSOR_DESC* PeepholeTensor;
    const DML_TENSOR_DESC* OutputSequenceTensor; const DML_TENSOR_DESC* OutputSingleTensor; const DML_TENSOR_DESC* OutputCellSingleTensor;
    UINT ActivationDescCount; const DML_OPERATOR_DESC* ActivationDescs; DML_RECURRENT_NETWORK_DIRECTION Direction;
    float ClipThreshold; BOOL UseClipThreshold; BOOL CoupleInputForget;
};
struct DML_RNN_OPERATOR_DESC {
    const DML_TENSOR_DESC* InputTensor; const DML_TENSOR_DESC* WeightTensor; const DML_TENSOR_DESC* RecurrenceTensor;
    const DML_TENSOR_DESC* BiasTensor; const DML_TENSOR_DESC* HiddenInitTensor; const DML_TENSOR_DESC* SequenceLengthsTensor;
    const DML_TENSOR_DESC* OutputSequenceTensor; const DML_TENSOR_DESC* OutputSingleTensor;
    UINT ActivationDescCount; const DML_OPERATOR_DESC* ActivationDescs; DML_RECURRENT_NETWORK_DIRECTION Direction;
};
