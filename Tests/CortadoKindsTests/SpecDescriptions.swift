import CortadoSpec

/// A multi-array feature's description (name, shape, element type), for specs the tests build.
func arrayDescription(_ name: String, _ shape: [Int64], _ type: CoreML_Specification_ArrayFeatureType.ArrayDataType)
    -> CoreML_Specification_FeatureDescription {
    var f = CoreML_Specification_FeatureDescription()
    f.name = name
    f.type.multiArrayType.shape = shape
    f.type.multiArrayType.dataType = type
    return f
}
